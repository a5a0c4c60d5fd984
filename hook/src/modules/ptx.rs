//! PTX text: each `.global` declaration (`[.visible|.weak|.common] .global
//! [.align A] .TYPE name[N]...;`) defines N x sizeof(TYPE) bytes; an
//! `.extern` one is another module's.

/// The bytes of the `.global` declarations of `text`.
pub fn globals(text: &[u8]) -> u64 {
    text.split(|&b| b == b'\n' || b == 0)
        .filter_map(|line| std::str::from_utf8(line).ok())
        .map(declared)
        .fold(0, u64::saturating_add)
}

/// The bytes one PTX line defines in the `.global` state space (0: none,
/// or an `.extern` declaration of another module's global).
fn declared(line: &str) -> u64 {
    let mut words = line.split_whitespace();
    let mut width = None;
    let mut global = false;
    while let Some(word) = words.next() {
        match word {
            ".visible" | ".weak" | ".common" => {}
            ".global" => global = true,
            ".align" => {
                words.next();
            }
            w if global => {
                width = scalar_bits(w);
                break;
            }
            _ => return 0,
        }
    }
    let (Some(bits), Some(name)) = (width, words.next()) else {
        return 0;
    };
    let name = name.split(['=', ';']).next().unwrap_or_default();
    // Each `[N]` multiplies; an unsized `[]` (an extern array) takes nothing.
    let mut count = 1u64;
    for dim in name.split('[').skip(1) {
        match dim.trim_end_matches(']').parse::<u64>() {
            Ok(n) => count = count.saturating_mul(n),
            Err(_) => return 0,
        }
    }
    count.saturating_mul(bits / 8)
}

/// The width of a PTX fundamental type (`.b8`, `.u32`, `.f64`, `.s16`...),
/// `.v2`/`.v4` vectors left out (nvcc declares globals as byte arrays).
fn scalar_bits(word: &str) -> Option<u64> {
    let rest = word.strip_prefix('.')?;
    let bits = rest
        .strip_prefix(['b', 'u', 's', 'f'])?
        .parse::<u64>()
        .ok()?;
    matches!(bits, 8 | 16 | 32 | 64).then_some(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptx_globals_are_summed() {
        let ptx = b".version 8.0\n.target sm_80\n\
            .global .align 4 .b8 table[1048576];\n\
            .visible .global .align 8 .u64 counter;\n\
            .global .align 1 .b8 grid[16][4] = {0};\n\
            .extern .global .align 4 .b8 other[64];\n\
            .shared .align 4 .b8 tile[4096];\n\
            .const .align 4 .b8 params[256];\n\
            .visible .entry k()\n{\n\tret;\n}\n";
        assert_eq!(globals(ptx), 1_048_576 + 8 + 64);
    }

    #[test]
    fn no_globals_and_unsized_arrays_take_nothing() {
        assert_eq!(globals(b".visible .entry k()\n{\n\tret;\n}\n"), 0);
        assert_eq!(globals(b".global .align 4 .b8 tail[];\n"), 0);
    }

    #[test]
    fn huge_declarations_saturate() {
        let ptx = b".global .b64 a[18446744073709551615];\n.global .b8 b[2];\n";
        assert_eq!(globals(ptx), u64::MAX);
    }
}
