//! The BPF instruction set as fsprof's hand-written programs use it: one instruction ([`Insn`],
//! made by [`insn`]), the opcodes and kernel helpers they call, and an assembler ([`Asm`]) whose
//! jumps go to labels, bound where their target is, the offsets computed when the program is
//! whole. Not here: what the programs do (`sampling.rs`, `walk.rs`, `cpu_wide/programs.rs`), loading
//! and attaching them (`bpf.rs`).

/// One BPF instruction.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

pub(super) fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: dst | (src << 4),
        off,
        imm,
    }
}

// Opcodes (linux/bpf.h, bpf_common.h).
pub(super) const ST_W: u8 = 0x62; // *(u32 *)(dst + off) = imm
pub(super) const ST_DW: u8 = 0x7a; // *(u64 *)(dst + off) = imm
pub(super) const STX_DW: u8 = 0x7b; // *(u64 *)(dst + off) = src
pub(super) const STX_W: u8 = 0x63; // *(u32 *)(dst + off) = src
pub(super) const LDX_DW: u8 = 0x79; // dst = *(u64 *)(src + off)
pub(super) const LDX_W: u8 = 0x61; // dst = *(u32 *)(src + off)
pub(super) const LDX_H: u8 = 0x69; // dst = *(u16 *)(src + off)
pub(super) const LDX_B: u8 = 0x71; // dst = *(u8 *)(src + off)
pub(super) const LD_IMM64: u8 = 0x18; // two slots: the second holds the upper half
pub(super) const ADD64_REG: u8 = 0x0f;
pub(super) const ADD64_IMM: u8 = 0x07;
pub(super) const SUB64_REG: u8 = 0x1f;
pub(super) const MUL64_IMM: u8 = 0x27;
pub(super) const AND64_IMM: u8 = 0x57;
pub(super) const MOD64_IMM: u8 = 0x97;
pub(super) const OR64_REG: u8 = 0x4f;
pub(super) const OR64_IMM: u8 = 0x47;
pub(super) const LSH64_IMM: u8 = 0x67;
pub(super) const RSH64_IMM: u8 = 0x77;
pub(super) const RSH64_REG: u8 = 0x7f;
pub(super) const ARSH64_IMM: u8 = 0xc7;
pub(super) const XOR64_REG: u8 = 0xaf;
pub(super) const MOV64_REG: u8 = 0xbf;
pub(super) const MOV64_IMM: u8 = 0xb7;
pub(super) const JA: u8 = 0x05;
pub(super) const JEQ_IMM: u8 = 0x15;
pub(super) const JEQ_REG: u8 = 0x1d;
pub(super) const JNE_IMM: u8 = 0x55;
pub(super) const JNE_REG: u8 = 0x5d;
pub(super) const JGT_IMM: u8 = 0x25;
pub(super) const JGT_REG: u8 = 0x2d;
pub(super) const JGE_IMM: u8 = 0x35;
pub(super) const JGE_REG: u8 = 0x3d;
pub(super) const JLT_REG: u8 = 0xad;
pub(super) const JLE_IMM: u8 = 0xb5;
pub(super) const JLE_REG: u8 = 0xbd;
/// Jumps when the kernel's budget of loop iterations is spent (Linux 6.9): loops whose
/// counters live in memory then verify in a few passes (the states converge), where a
/// counted loop is verified once per iteration, and a walk's branches pile up past the
/// verifier's bound.
pub(super) const MAY_GOTO: u8 = 0xe5;
pub(super) const CALL: u8 = 0x85;
pub(super) const EXIT: u8 = 0x95;
/// `LD_IMM64`'s source register for "the immediate is a map's file descriptor".
pub(super) const PSEUDO_MAP_FD: u8 = 1;

// Kernel helpers (linux/bpf.h's `enum bpf_func_id`).
pub(super) const HELPER_MAP_LOOKUP_ELEM: i32 = 1;
pub(super) const HELPER_MAP_DELETE_ELEM: i32 = 3;
pub(super) const HELPER_KTIME_GET_NS: i32 = 5;
pub(super) const HELPER_GET_PRANDOM_U32: i32 = 7;
pub(super) const HELPER_TAIL_CALL: i32 = 12;
pub(super) const HELPER_GET_CURRENT_PID_TGID: i32 = 14;
pub(super) const HELPER_GET_CURRENT_TASK: i32 = 35;
pub(super) const HELPER_PROBE_READ_USER: i32 = 112;
pub(super) const HELPER_PROBE_READ_KERNEL: i32 = 113;
pub(super) const HELPER_RINGBUF_OUTPUT: i32 = 130;
pub(super) const HELPER_RINGBUF_RESERVE: i32 = 131;
pub(super) const HELPER_RINGBUF_SUBMIT: i32 = 132;
pub(super) const HELPER_RINGBUF_QUERY: i32 = 134;
pub(super) const HELPER_GET_CURRENT_TASK_BTF: i32 = 158;
pub(super) const HELPER_TASK_PT_REGS: i32 = 175;
/// `bpf_ringbuf_query` flag: the bytes written and not yet read.
pub(super) const RB_AVAIL_DATA: i32 = 0;
/// `bpf_ringbuf_output` flag: wake nobody (fsprof reads the ring on its own schedule).
pub(super) const RB_NO_WAKEUP: i32 = 1;
/// `BPF_RB_FORCE_WAKEUP`: wake the ring's reader whatever it has left unread.
pub(super) const RB_FORCE_WAKEUP: i32 = 2;

/// A place in a program that jumps go to: made by [`Asm::label`], bound once by [`Asm::bind`].
#[derive(Clone, Copy, Debug)]
pub(super) struct Label(usize);

/// A program being written: instructions in order, and the jumps whose targets are labels.
#[derive(Default)]
pub(super) struct Asm {
    insns: Vec<Insn>,
    /// Where each label is bound (an instruction's index), once it is.
    bound: Vec<Option<usize>>,
    /// Each jump's instruction index and the label it goes to.
    jumps: Vec<(usize, Label)>,
}

impl Asm {
    pub(super) fn new() -> Asm {
        Asm::default()
    }

    pub(super) fn push(&mut self, insn: Insn) {
        self.insns.push(insn);
    }

    pub(super) fn extend(&mut self, insns: impl IntoIterator<Item = Insn>) {
        self.insns.extend(insns);
    }

    /// A new label, bound nowhere yet.
    pub(super) fn label(&mut self) -> Label {
        self.bound.push(None);
        Label(self.bound.len() - 1)
    }

    /// Binds `label` to the next instruction written.
    pub(super) fn bind(&mut self, label: Label) {
        let place = &mut self.bound[label.0];
        assert!(place.is_none(), "a label bound twice");
        *place = Some(self.insns.len());
    }

    /// A label bound to the next instruction written (a loop's top, for a jump back).
    pub(super) fn here(&mut self) -> Label {
        let label = self.label();
        self.bind(label);
        label
    }

    /// A conditional jump (`code` a `J*` opcode comparing `dst` with `src` or `imm`), or with
    /// `JA` an unconditional one, to `to`.
    pub(super) fn jump(&mut self, code: u8, dst: u8, src: u8, imm: i32, to: Label) {
        self.jumps.push((self.insns.len(), to));
        self.insns.push(insn(code, dst, src, 0, imm));
    }

    /// The program, every jump's offset set. Panics where a jump's label was never bound or
    /// is out of a jump's reach: a mistake in fsprof's programs, not in what it reads.
    pub(super) fn finish(mut self) -> Vec<Insn> {
        for (at, label) in self.jumps {
            let target = self.bound[label.0].expect("a jump to a label never bound");
            let off = target as i64 - at as i64 - 1;
            self.insns[at].off = i16::try_from(off).expect("a jump within reach");
        }
        self.insns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_go_forward_and_back_to_their_labels() {
        let mut p = Asm::new();
        let top = p.here();
        let end = p.label();
        p.push(insn(MOV64_IMM, 0, 0, 0, 1));
        p.jump(JEQ_IMM, 0, 0, 0, end);
        p.push(insn(MOV64_IMM, 0, 0, 0, 2));
        p.jump(JA, 0, 0, 0, top);
        p.bind(end);
        p.push(insn(EXIT, 0, 0, 0, 0));
        let program = p.finish();
        assert_eq!(program[1], insn(JEQ_IMM, 0, 0, 2, 0));
        assert_eq!(program[3], insn(JA, 0, 0, -4, 0));
    }

    #[test]
    #[should_panic(expected = "never bound")]
    fn a_jump_to_an_unbound_label_is_refused() {
        let mut p = Asm::new();
        let nowhere = p.label();
        p.jump(JA, 0, 0, 0, nowhere);
        p.finish();
    }
}
