//! A compiled module's or component's image in memory, read in place: the bytes wasmtime's
//! `serialize` copies, for storing artifacts and reading their symbols without a second copy
//! (a 69 MB module's image is 246 MB).

use wasmtime::Module;

/// The bytes `module.serialize()` would copy (wasmtime's `serialize` is a copy of this very
/// image), read in place: storing a 69 MB module's 246 MB artifact then takes no second copy
/// of it at the cold start's peak of memory. For a module compiled with `Module::new` (one
/// taken from a component cannot be serialized).
pub fn module_image(module: &Module) -> &[u8] {
    let range = module.image_range();
    // SAFETY: wasmtime maps the image readable for as long as the module lives and never
    // writes it once published (its documentation forbids changing its contents or
    // protections); the borrow of `module` keeps it alive.
    unsafe { image_slice(range) }
}

/// [`module_image`] for a component: the bytes `Component::serialize` copies.
pub fn component_image(component: &wasmtime::component::Component) -> &[u8] {
    // SAFETY: as for a module's image.
    unsafe { image_slice(component.image_range()) }
}

/// # Safety
///
/// `range` must be readable, unchanging memory for the lifetime the caller gives the slice.
unsafe fn image_slice<'a>(range: std::ops::Range<*const u8>) -> &'a [u8] {
    let len = range.end as usize - range.start as usize;
    // SAFETY: as promised by the caller.
    unsafe { std::slice::from_raw_parts(range.start, len) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_read_in_place_is_what_serialize_copies() {
        let engine = crate::run::engine::new_engine().unwrap();
        let wat = "(module (func (export \"f\") (result i32) i32.const 7))";
        let module = Module::new(&engine, wat).unwrap();
        let serialized = module.serialize().unwrap();
        assert!(!serialized.is_empty());
        assert_eq!(module_image(&module), &serialized[..]);
        let component = wasmtime::component::Component::new(&engine, "(component)").unwrap();
        assert_eq!(
            component_image(&component),
            &component.serialize().unwrap()[..]
        );
    }
}
