//! The LZ4 block format (lz4's doc/lz4_Block_format.md), which nvcc's
//! compressed fat binary entries use (flag 0x2000): sequences of a token
//! (literal length high nibble, match length - 4 low nibble, 15 meaning
//! more bytes follow, each added, until one below 255), the literals, then
//! a 2-byte little-endian offset back into the output and the match; the
//! last sequence has literals only.

/// `input` decompressed to exactly `size` bytes; None: the stream is
/// malformed, points before its output or does not make `size` bytes.
pub fn decompress(input: &[u8], size: usize) -> Option<Vec<u8>> {
    // Grown as the stream says, never reserved from the declared size.
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < input.len() {
        let token = input[at];
        at += 1;
        let literals = length(input, &mut at, (token >> 4) as usize)?;
        let end = at.checked_add(literals)?;
        if out.len().checked_add(literals)? > size {
            return None;
        }
        out.try_reserve(literals).ok()?;
        out.extend_from_slice(input.get(at..end)?);
        at = end;
        if at == input.len() {
            break; // the last sequence: literals only
        }
        let offset = u16::from_le_bytes([*input.get(at)?, *input.get(at + 1)?]) as usize;
        at += 2;
        let matched = length(input, &mut at, (token & 0xf) as usize)?.checked_add(4)?;
        if offset == 0 || offset > out.len() || out.len().checked_add(matched)? > size {
            return None;
        }
        // Byte by byte: a match may overlap what it copies (offset < length).
        out.try_reserve(matched).ok()?;
        let from = out.len() - offset;
        for i in 0..matched {
            out.push(out[from + i]);
        }
    }
    (out.len() == size).then_some(out)
}

/// A length whose token nibble is `nibble`, its extra bytes read from `at`.
fn length(input: &[u8], at: &mut usize, nibble: usize) -> Option<usize> {
    let mut n = nibble;
    if nibble == 15 {
        loop {
            let b = *input.get(*at)?;
            *at += 1;
            n = n.checked_add(b as usize)?;
            if b != 255 {
                break;
            }
        }
    }
    Some(n)
}

/// `data` as an LZ4 block of literals only (a valid block the tests make
/// without a compressor).
#[cfg(test)]
pub fn literals(data: &[u8]) -> Vec<u8> {
    let mut block = Vec::new();
    let n = data.len();
    block.push((n.min(15) as u8) << 4);
    if n >= 15 {
        let mut rest = n - 15;
        while rest >= 255 {
            block.push(255);
            rest -= 255;
        }
        block.push(rest as u8);
    }
    block.extend_from_slice(data);
    block
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_overlapping_matches() {
        // "abc", then a match of 9 at offset 3: "abcabcabcabc".
        let block = [0x35, b'a', b'b', b'c', 3, 0, 0x10, b'!'];
        assert_eq!(
            decompress(&block, 13).as_deref(),
            Some(&b"abcabcabcabc!"[..])
        );
        let long: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        assert_eq!(decompress(&literals(&long), 1000), Some(long));
    }

    #[test]
    fn malformed_blocks_are_refused() {
        assert_eq!(
            decompress(&[0x35, b'a', b'b', b'c', 4, 0, 0x10, b'!'], 13),
            None
        );
        assert_eq!(
            decompress(&[0x35, b'a', b'b', b'c', 0, 0, 0x10, b'!'], 13),
            None
        );
        assert_eq!(decompress(&[0x30, b'a'], 3), None);
        assert_eq!(decompress(&literals(b"abcd"), 3), None);
        assert_eq!(decompress(&literals(b"abcd"), 5), None);
        assert_eq!(decompress(&[0xf0, 255, 255], 100), None);
    }
}
