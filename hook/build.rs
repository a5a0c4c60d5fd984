//! Sets the hook library's soname (it is preloaded by path, never linked).

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda_limiter.so");
}
