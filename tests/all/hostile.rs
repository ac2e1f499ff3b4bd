//! Components made hostile on purpose by the tests themselves (with wasm-encoder), for the
//! attacks of the hardening suite: their bytes are valid WebAssembly that costs the host
//! something (compile memory and time) before any call is made.

use wasm_encoder::{
    CodeSection, Component, EntityType, ExportKind, ExportSection, Function, FunctionSection,
    ImportSection, InstanceSection, Instruction, MemorySection, MemoryType, Module, ModuleSection,
    TypeSection, ValType,
};

/// A component whose one core function keeps `values` values live (on the operand stack)
/// across `calls` calls of an import: the compiler's work grows with their product. Valid,
/// and small on disk (12,000 x 12,000 is 132 KB and about 5 CPU-seconds to compile in a
/// debug build; 20,000 x 20,000 is 223 KB and about 16), but light on memory (under 100 MB).
pub fn register_hog(values: u32, calls: u32) -> Vec<u8> {
    let mut component = Component::new();
    component.section(&ModuleSection(&register_hog_module(values, calls)));
    component.finish()
}

/// The core module of [`register_hog`].
pub fn register_hog_module(values: u32, calls: u32) -> Module {
    let mut types = TypeSection::new();
    types.ty().function([], []);
    types.ty().function([ValType::I64], [ValType::I64]);
    // An imported function: the compiler cannot see through the calls.
    let mut imports = ImportSection::new();
    imports.import("env", "tick", EntityType::Function(0));
    let mut functions = FunctionSection::new();
    functions.function(1); // $hog, function 1
    let mut exports = ExportSection::new();
    exports.export("hog", ExportKind::Func, 1);
    let mut code = CodeSection::new();
    // The values stay on the operand stack, each made from the parameter, through every
    // call, and are summed at the end.
    let mut hog = Function::new([]);
    for i in 1..=values {
        hog.instruction(&Instruction::LocalGet(0));
        hog.instruction(&Instruction::I64Const(i64::from(i) * 7919));
        hog.instruction(&Instruction::I64Mul);
    }
    for _ in 0..calls {
        hog.instruction(&Instruction::Call(0));
    }
    for _ in 1..values {
        hog.instruction(&Instruction::I64Add);
    }
    hog.instruction(&Instruction::End);
    code.function(&hog);
    let mut module = Module::new();
    module
        .section(&types)
        .section(&imports)
        .section(&functions)
        .section(&exports)
        .section(&code);
    module
}

/// A component of `count` core functions that each return their argument: about 6 bytes
/// each on disk, and about 6 KB each of the compiler's memory, all held until the last one
/// is compiled (40,000 of them are 240 KB and need about 250 MB to compile).
pub fn many_functions(count: u32) -> Vec<u8> {
    let mut types = TypeSection::new();
    types.ty().function([ValType::I64], [ValType::I64]);
    let mut functions = FunctionSection::new();
    let mut code = CodeSection::new();
    for _ in 0..count {
        functions.function(0);
        let mut body = Function::new([]);
        body.instruction(&Instruction::LocalGet(0));
        body.instruction(&Instruction::End);
        code.function(&body);
    }
    functions_component(&types, &functions, &code)
}

/// A component of one core module made of these sections.
fn functions_component(
    types: &TypeSection,
    functions: &FunctionSection,
    code: &CodeSection,
) -> Vec<u8> {
    let mut module = Module::new();
    module.section(types).section(functions).section(code);
    let mut component = Component::new();
    component.section(&ModuleSection(&module));
    component.finish()
}

/// A component with one core function whose body is `bytes` bytes of `nop`s.
pub fn huge_function(bytes: usize) -> Vec<u8> {
    let mut types = TypeSection::new();
    types.ty().function([], []);
    let mut functions = FunctionSection::new();
    functions.function(0);
    let mut code = CodeSection::new();
    let mut body = Function::new([]);
    for _ in 0..bytes {
        body.instruction(&Instruction::Nop);
    }
    body.instruction(&Instruction::End);
    code.function(&body);
    functions_component(&types, &functions, &code)
}

/// A component that instantiates `instances` times a core module with one memory of
/// `memory_pages` pages (0: no memory): it asks the pool for that many core instances and
/// memories per call.
pub fn many_instances(instances: u32, memory_pages: u64) -> Vec<u8> {
    let mut module = Module::new();
    if memory_pages > 0 {
        let mut memories = MemorySection::new();
        memories.memory(MemoryType {
            minimum: memory_pages,
            maximum: None,
            memory64: false,
            shared: false,
            page_size_log2: None,
        });
        module.section(&memories);
    }
    let mut component = Component::new();
    component.section(&ModuleSection(&module));
    let mut instances_section = InstanceSection::new();
    for _ in 0..instances {
        instances_section.instantiate(0, Vec::<(&str, wasm_encoder::ModuleArg)>::new());
    }
    component.section(&instances_section);
    component.finish()
}
