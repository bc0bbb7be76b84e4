#!/usr/bin/env python3
"""Runs a command with its timer slack set: `with-slack.py NS COMMAND [ARGS...]`.

The slack (prctl PR_SET_TIMERSLACK, in nanoseconds) is inherited across fork and exec, so
the command's programs, fsprof's targets included, sleep with it. Used to show that a
sleep's slack ties its wake-up to a per-CPU sampling tick (docs/benchmarks-history.md,
"A sleep's timer slack"). Linux only; stdlib only.
"""
import ctypes
import os
import sys

PR_SET_TIMERSLACK = 29

if len(sys.argv) < 3:
    sys.exit("usage: with-slack.py NS COMMAND [ARGS...]")
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(PR_SET_TIMERSLACK, int(sys.argv[1]), 0, 0, 0) != 0:
    sys.exit(f"prctl(PR_SET_TIMERSLACK): {os.strerror(ctypes.get_errno())}")
os.execvp(sys.argv[2], sys.argv[2:])
