//! What a tick found: the stack of the module's functions in the addresses the handler kept,
//! mapped by the code map, with the caller a frameless instant hides taken back.

use crate::run::code::map::{CodeMap, Running};
use crate::run::interrupt::frames::Stack;

use super::Path;

/// What a tick found: its stack, and the innermost function's own address there (the
/// interrupted instruction, or its call into the host), where its self time is spent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub path: Path,
    pub pc: usize,
    /// When the innermost function is a script's (see [`languages`]), the line of the
    /// script it was at.
    pub script_line: Option<i32>,
}

/// The stack of the module's functions in `stack` (the program counter, then return
/// addresses), mapped by `code`; `None` when none of them is on it. `at_return` says
/// whether the instruction at an address of the module's code is a return.
pub fn found_in(code: &CodeMap, stack: &Stack, at_return: impl Fn(usize) -> bool) -> Option<Found> {
    let mut functions = Vec::with_capacity(stack.pcs.len() + 1);
    let mut host_call = None;
    let mut innermost = 0;
    // A counted module's own code (the edge counters' `arc`) on top: its caller runs.
    let mut counting = false;
    for (i, &pc) in stack.pcs.iter().enumerate() {
        // A return address is just past its call: the byte before it is the call's.
        let address = if i == 0 { pc } else { pc.wrapping_sub(1) };
        let running = code.running(address);
        if i == 0 && running == Running::Probe {
            counting = true;
        }
        if let Running::Function(id) = running {
            if functions.is_empty() {
                innermost = address;
                if i > 0 && !(i == 1 && counting) {
                    host_call = Some(pc);
                }
            }
            functions.push(id);
            if i == 0 {
                // The caller the frame pointers skip while this function has no frame.
                let caller = unframed_return(code, stack, &at_return)
                    .map(|at| code.running(at.wrapping_sub(1)));
                if let Some(Running::Function(caller)) = caller {
                    functions.push(caller);
                }
            }
        }
    }
    if functions.is_empty() {
        return None;
    }
    functions.reverse();
    Some(Found {
        path: (functions, host_call),
        pc: innermost,
        script_line: None,
    })
}

/// The return address of `stack`'s interrupted function when the frame pointer was still
/// its caller's (see [`Stack::unframed`]): at its first instruction (`push rbp`), at its
/// second (`mov rbp, rsp`), or at a return (`ret`, after `pop rbp`), as Cranelift's x86-64
/// functions begin and end; `at_return` reads whether an instruction is a `ret`. `None`
/// elsewhere, and on other machines.
fn unframed_return(
    code: &CodeMap,
    stack: &Stack,
    at_return: impl Fn(usize) -> bool,
) -> Option<usize> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    let pc = *stack.pcs.first()?;
    let start = code.function_start(pc)?;
    let word = match pc - start {
        0 => stack.unframed[0],
        1 => stack.unframed[1],
        _ if at_return(pc) => stack.unframed[0],
        _ => return None,
    };
    (word != 0).then_some(word)
}

/// Whether the instruction at `pc`, an address in the module's compiled code, is a `ret`:
/// plain, or `ret imm16`, with which a function of Cranelift's `tail` calling convention
/// (every wasm function's) pops the arguments its caller passed on the stack (a function
/// of more than six parameters with its two context pointers, such as WASI's `fd_pwrite`'s
/// wrapper).
pub fn is_return(pc: usize) -> bool {
    // SAFETY: `pc` is in one of the module's compiled functions (the code map says so),
    // whose code stays mapped, readable, while the module lives, which is longer than the
    // run its reader reads.
    cfg!(target_arch = "x86_64")
        && is_return_opcode(unsafe { std::ptr::read_volatile(pc as *const u8) })
}

/// Whether an x86-64 instruction beginning with byte `opcode` is a near `ret`: `C3`, or
/// `C2` followed by the bytes to pop.
fn is_return_opcode(opcode: u8) -> bool {
    matches!(opcode, 0xC3 | 0xC2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_return_that_pops_its_callers_arguments_is_a_return() {
        // `ret`, `ret 0x10`; `push rbp`, `mov rbp, rsp` (48 89 e5), `call` (e8) are not.
        assert!(is_return_opcode(0xC3));
        assert!(is_return_opcode(0xC2));
        for other in [0x55, 0x48, 0xE8, 0x5D] {
            assert!(!is_return_opcode(other), "{other:#x}");
        }
        if cfg!(target_arch = "x86_64") {
            let code = [0xC2u8, 0x10, 0x00, 0x55];
            assert!(is_return(code.as_ptr() as usize));
            assert!(!is_return(code.as_ptr() as usize + 3));
        }
    }
}
