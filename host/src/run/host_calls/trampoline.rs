//! The way from a wrapper back to the real host function. WASI's functions read and write
//! the program's memory through the export `memory` of the instance that called them; a
//! host function calling another directly has no calling instance. So the wrappers call
//! the real functions through a small module instantiated beside the program, which
//! exports the program's memory and, for each real function, a function that calls it.

use wasm_encoder::{
    CodeSection, EntityType, ExportKind, ExportSection, Function, FunctionSection, ImportSection,
    Instruction, MemoryType, Module, TypeSection, ValType,
};
use wasmtime::{AsContextMut, Extern, Func, FuncType, Instance};

use crate::run::host_state::HostState;

/// The import module of the real functions, and of the program's memory.
const REAL: &str = "real";

/// The export through which the trampoline calls real function `i`.
fn call_name(i: usize) -> String {
    format!("call{i}")
}

/// The number type of `ty`, if it is one (WASI's functions take and return numbers
/// only).
fn number(ty: wasmtime::ValType) -> Option<ValType> {
    match ty {
        wasmtime::ValType::I32 => Some(ValType::I32),
        wasmtime::ValType::I64 => Some(ValType::I64),
        wasmtime::ValType::F32 => Some(ValType::F32),
        wasmtime::ValType::F64 => Some(ValType::F64),
        _ => None,
    }
}

/// The memory the trampoline imports: the program's, with 64-bit addresses or not, pages of
/// `2^page_size_log2` bytes, and shared (wasi-threads) with its maximum in pages, or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryShape {
    pub memory64: bool,
    pub page_size_log2: u8,
    pub shared_maximum: Option<u64>,
}

impl MemoryShape {
    /// The shape of `memory` (a memory or a shared memory); `None` for anything else.
    fn of(store: impl wasmtime::AsContext, memory: &Extern) -> Option<Self> {
        match memory {
            Extern::Memory(m) => {
                let ty = m.ty(&store);
                Some(MemoryShape {
                    memory64: ty.is_64(),
                    page_size_log2: ty.page_size_log2(),
                    shared_maximum: None,
                })
            }
            Extern::SharedMemory(m) => {
                let ty = m.ty();
                Some(MemoryShape {
                    memory64: ty.is_64(),
                    page_size_log2: ty.page_size_log2(),
                    shared_maximum: Some(ty.maximum()?),
                })
            }
            _ => None,
        }
    }
}

/// The trampoline module's bytes for functions of types `types`, beside a memory of shape
/// `memory`; `None` where a type is not made of numbers.
pub fn module_bytes(types: &[FuncType], memory: MemoryShape) -> Option<Vec<u8>> {
    let MemoryShape {
        memory64,
        page_size_log2,
        shared_maximum,
    } = memory;
    let mut type_section = TypeSection::new();
    let mut imports = ImportSection::new();
    let mut functions = FunctionSection::new();
    let mut exports = ExportSection::new();
    let mut code = CodeSection::new();
    imports.import(
        REAL,
        "memory",
        EntityType::Memory(MemoryType {
            minimum: 0,
            maximum: shared_maximum,
            memory64,
            shared: shared_maximum.is_some(),
            page_size_log2: (page_size_log2 != 16).then_some(u32::from(page_size_log2)),
        }),
    );
    exports.export("memory", ExportKind::Memory, 0);
    let count = types.len() as u32;
    for (i, ty) in types.iter().enumerate() {
        let params = ty.params().map(number).collect::<Option<Vec<_>>>()?;
        let results = ty.results().map(number).collect::<Option<Vec<_>>>()?;
        type_section.ty().function(params.clone(), results);
        imports.import(REAL, &format!("f{i}"), EntityType::Function(i as u32));
        functions.function(i as u32);
        exports.export(&call_name(i), ExportKind::Func, count + i as u32);
        let mut body = Function::new([]);
        for p in 0..params.len() as u32 {
            body.instruction(&Instruction::LocalGet(p));
        }
        body.instruction(&Instruction::Call(i as u32));
        body.instruction(&Instruction::End);
        code.function(&body);
    }
    let mut module = Module::new();
    module
        .section(&type_section)
        .section(&imports)
        .section(&functions)
        .section(&exports)
        .section(&code);
    Some(module.finish())
}

/// How a trampoline's module is compiled, when not by `Module::new`: through wprof's cache
/// of compiled code, which the command running the program knows and this layer does not
/// (compiling it took a profiled warm start of a 2 MB program 6 ms on every run).
type Compiler = dyn Fn(&wasmtime::Engine, &[u8]) -> anyhow::Result<wasmtime::Module> + Send + Sync;

static COMPILER: std::sync::OnceLock<Box<Compiler>> = std::sync::OnceLock::new();

/// Compiles every trampoline of this process with `compile` (the first call wins).
pub fn compile_with(
    compile: impl Fn(&wasmtime::Engine, &[u8]) -> anyhow::Result<wasmtime::Module>
        + Send
        + Sync
        + 'static,
) {
    let _ = COMPILER.set(Box::new(compile));
}

/// Instantiates the trampoline for `reals` beside `memory` (the program's memory or shared
/// memory; from inside a call to the host: `store` is the caller's); returns, per real
/// function, the function the wrapper calls instead. `None` (and the wrappers call the real
/// functions directly) where it cannot be made.
pub fn connect(
    mut store: impl AsContextMut<Data = HostState>,
    memory: Extern,
    reals: &[Func],
) -> Option<Vec<Func>> {
    let mut store = store.as_context_mut();
    let types: Vec<FuncType> = reals.iter().map(|f| f.ty(&store)).collect();
    let shape = MemoryShape::of(&store, &memory)?;
    let bytes = module_bytes(&types, shape)?;
    let module = match COMPILER.get() {
        Some(compile) => compile(store.engine(), &bytes),
        None => wasmtime::Module::new(store.engine(), &bytes).map_err(|e| anyhow::anyhow!("{e}")),
    }
    .map_err(|e| tracing::warn!("cannot compile the host calls' trampoline: {e}"))
    .ok()?;
    let mut imports: Vec<Extern> = vec![memory];
    imports.extend(reals.iter().map(|&f| Extern::Func(f)));
    let instance = Instance::new(&mut store, &module, &imports)
        .map_err(|e| tracing::warn!("cannot instantiate the host calls' trampoline: {e}"))
        .ok()?;
    (0..reals.len())
        .map(|i| instance.get_func(&mut store, &call_name(i)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::ValType as V;

    #[test]
    fn the_module_is_valid_for_every_number_type() {
        let engine = wasmtime::Engine::default();
        let types = [
            FuncType::new(&engine, [V::I32, V::I64, V::I32], [V::I32]),
            FuncType::new(&engine, [], [V::I32]),
            FuncType::new(&engine, [V::F32, V::F64], []),
        ];
        for memory64 in [false, true] {
            for shared_maximum in [None, Some(16)] {
                let shape = MemoryShape {
                    memory64,
                    page_size_log2: 16,
                    shared_maximum,
                };
                let bytes = module_bytes(&types, shape).unwrap();
                wasmparser::Validator::new().validate_all(&bytes).unwrap();
            }
        }
        let reference = FuncType::new(&engine, [V::EXTERNREF], []);
        let plain = MemoryShape {
            memory64: false,
            page_size_log2: 16,
            shared_maximum: None,
        };
        assert!(module_bytes(&[reference], plain).is_none());
    }
}
