// jit.js: CPU-bound JavaScript for fsprof's JIT test (tests/tests/real_programs.rs). Two functions, each
// timed by the script itself, called in turn for SECONDS seconds; the truth goes to TRUTH_FILE
// (total_ms, and self_ms of each function, as tests/src/lib.rs's truth files have them).
//
//   node --perf-basic-prof jit.js SECONDS TRUTH_FILE
"use strict";
const seconds = Number(process.argv[2]);
const truthPath = process.argv[3];

function fsprofHashA(n) {
    let x = 1;
    for (let i = 0; i < n; i++) x = (Math.imul(x, 31) + i) | 0;
    return x;
}

function fsprofHashB(n) {
    let x = 7;
    for (let i = 0; i < n; i++) x = (x ^ Math.imul(i, 0x9e3779b1)) | 0;
    return x;
}

const self = { fsprofHashA: 0, fsprofHashB: 0 };
let sink = 0;
const start = performance.now();
while (performance.now() - start < seconds * 1000) {
    let t = performance.now();
    sink += fsprofHashA(200000);
    self.fsprofHashA += performance.now() - t;
    t = performance.now();
    sink += fsprofHashB(600000);
    self.fsprofHashB += performance.now() - t;
}
const total = performance.now() - start;
require("fs").writeFileSync(truthPath, JSON.stringify({ total_ms: total, self_ms: self, sink }));
