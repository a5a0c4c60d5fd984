//! A Zstandard frame decoder (RFC 8878), for nvcc's compressed fat binary
//! entries (flag 0x8000, `--compress-mode=size`, CUDA 12.8 on): one frame,
//! without a dictionary, of raw, RLE and compressed blocks (Huffman
//! literals, FSE-coded sequences, repeat offsets). Its output is bounded by
//! the entry's declared size and every length the frame declares is checked
//! against its input and that bound, since a tenant crafts the image; what
//! the format allows but nvcc does not emit (dictionaries, skippable or
//! further frames) is refused. The content checksum is skipped, not
//! verified: the decoded bytes are only measured, never run.

/// The frame's magic number, little-endian.
const MAGIC: u32 = 0xFD2F_B528;
/// The largest block's contents (RFC 8878 3.1.1.2.4: `Block_Maximum_Size`).
const MAX_BLOCK: usize = 128 << 10;

/// `input`, one frame, decompressed to exactly `size` bytes; None: the
/// frame is malformed, needs a dictionary, or does not make `size` bytes.
pub fn decompress(input: &[u8], size: usize) -> Option<Vec<u8>> {
    let mut r = Bytes { data: input, at: 0 };
    if r.le(4)? != u64::from(MAGIC) {
        return None;
    }
    let descriptor = r.byte()?;
    let (fcs_flag, single) = (descriptor >> 6, descriptor & 0x20 != 0);
    // Reserved bit set, or a dictionary the frame needs and nobody has.
    if descriptor & 0x08 != 0 || descriptor & 0x03 != 0 {
        return None;
    }
    if !single {
        r.byte()?; // the window: the whole output is kept, so any fits
    }
    let declared = match (fcs_flag, single) {
        (0, false) => None,
        (0, true) => Some(r.le(1)?),
        (1, _) => Some(r.le(2)? + 256),
        (2, _) => Some(r.le(4)?),
        _ => Some(r.le(8)?),
    };
    if declared.is_some_and(|d| d != size as u64) {
        return None;
    }
    let mut state = State {
        out: Vec::new(),
        size,
        repeats: [1, 4, 8],
        huffman: None,
        tables: [None, None, None],
    };
    loop {
        let header = r.le(3)? as usize;
        let len = header >> 3;
        match (header >> 1) & 3 {
            0 => state.put(r.take(len)?)?,
            1 => {
                let b = r.byte()?;
                state.room(len)?;
                state.out.resize(state.out.len() + len, b);
            }
            2 if len <= MAX_BLOCK => state.block(r.take(len)?)?,
            _ => return None,
        }
        if header & 1 != 0 {
            break;
        }
    }
    if descriptor & 0x04 != 0 {
        r.take(4)?; // the checksum
    }
    (r.at == input.len() && state.out.len() == size).then_some(state.out)
}

/// What decoding carries from one block to the next of a frame.
struct State {
    out: Vec<u8>,
    size: usize,
    repeats: [usize; 3],
    huffman: Option<Huffman>,
    /// The literal length, offset and match length tables (`Repeat_Mode`).
    tables: [Option<Fse>; 3],
}

impl State {
    /// Room for `n` more bytes within the declared size.
    fn room(&mut self, n: usize) -> Option<()> {
        if self.out.len().checked_add(n)? > self.size {
            return None;
        }
        self.out.try_reserve(n).ok()
    }

    fn put(&mut self, bytes: &[u8]) -> Option<()> {
        self.room(bytes.len())?;
        self.out.extend_from_slice(bytes);
        Some(())
    }

    /// A compressed block: its literals section, then its sequences.
    fn block(&mut self, block: &[u8]) -> Option<()> {
        let mut r = Bytes { data: block, at: 0 };
        let literals = self.literals(&mut r)?;
        let count = match r.byte()? as usize {
            0 => 0,
            b @ 1..=127 => b,
            b @ 128..=254 => ((b - 128) << 8) + r.byte()? as usize,
            _ => r.le(2)? as usize + 0x7F00,
        };
        if count == 0 {
            return if r.at == block.len() {
                self.put(&literals)
            } else {
                None
            };
        }
        let modes = r.byte()?;
        if modes & 3 != 0 {
            return None;
        }
        for (i, kind) in [Kind::LITERALS, Kind::OFFSETS, Kind::MATCHES]
            .iter()
            .enumerate()
        {
            let mode = (modes >> (6 - 2 * i)) & 3;
            self.tables[i] = Some(match mode {
                0 => Fse::new(kind.predefined, kind.predefined_log)?,
                1 => Fse::rle(r.byte()?),
                2 => {
                    let (counts, log) = normalized(&mut r, kind.max_log, kind.max_symbol)?;
                    Fse::new(&counts, log)?
                }
                _ => self.tables[i].take()?,
            });
        }
        let [Some(ll), Some(of), Some(ml)] = &self.tables else {
            return None;
        };
        let (ll, of, ml) = (ll.clone(), of.clone(), ml.clone());
        let mut bits = Backward::new(&block[r.at..])?;
        let mut states = [
            ll.init(&mut bits)?,
            of.init(&mut bits)?,
            ml.init(&mut bits)?,
        ];
        let mut lit = 0usize;
        for n in 0..count {
            let (ls, os, ms) = (
                ll.symbol(states[0]),
                of.symbol(states[1]),
                ml.symbol(states[2]),
            );
            if os > 31 {
                return None;
            }
            let offset = (1usize << os) + bits.read(os)? as usize;
            let (mb, mx) = *MATCH_CODES.get(ms as usize)?;
            let matched = mb as usize + bits.read(mx)? as usize;
            let (lb, lx) = *LITERAL_CODES.get(ls as usize)?;
            let literal = lb as usize + bits.read(lx)? as usize;
            if n + 1 < count {
                states[0] = ll.next(states[0], &mut bits)?;
                states[2] = ml.next(states[2], &mut bits)?;
                states[1] = of.next(states[1], &mut bits)?;
            }
            let end = lit.checked_add(literal)?;
            self.put(literals.get(lit..end)?)?;
            lit = end;
            let distance = self.offset(offset, literal)?;
            if distance > self.out.len() {
                return None;
            }
            self.room(matched)?;
            // A match may overlap what it copies (distance < length): it
            // repeats the `distance` bytes from `from`, so what is written
            // from there (whole periods until the last piece) is copied,
            // doubling each time.
            let from = self.out.len() - distance;
            let mut left = matched;
            while left > 0 {
                let piece = left.min(self.out.len() - from);
                self.out.extend_from_within(from..from + piece);
                left -= piece;
            }
        }
        if !bits.done() {
            return None;
        }
        self.put(literals.get(lit..)?)
    }

    /// The distance an offset value means (RFC 8878 3.1.1.5), updating the
    /// three repeat offsets.
    fn offset(&mut self, value: usize, literal: usize) -> Option<usize> {
        let r = &mut self.repeats;
        if value > 3 {
            *r = [value - 3, r[0], r[1]];
            return Some(r[0]);
        }
        let index = value + usize::from(literal == 0);
        let distance = match index {
            1 => return Some(r[0]),
            2 => r[1],
            3 => r[2],
            _ => r[0].checked_sub(1).filter(|&d| d > 0)?,
        };
        if index == 2 {
            *r = [distance, r[0], r[2]];
        } else {
            *r = [distance, r[0], r[1]];
        }
        Some(distance)
    }

    /// A block's literals section (RFC 8878 3.1.1.3.1).
    fn literals(&mut self, r: &mut Bytes) -> Option<Vec<u8>> {
        let first = r.byte()?;
        let (kind, format) = (first & 3, (first >> 2) & 3);
        if kind < 2 {
            let regenerated = match format {
                0 | 2 => (first >> 3) as usize,
                1 => (first >> 4) as usize + ((r.byte()? as usize) << 4),
                _ => (first >> 4) as usize + ((r.le(2)? as usize) << 4),
            };
            if regenerated > MAX_BLOCK {
                return None;
            }
            return Some(if kind == 0 {
                r.take(regenerated)?.to_vec()
            } else {
                vec![r.byte()?; regenerated]
            });
        }
        let (extra, width, streams) = match format {
            0 => (2, 10, 1),
            1 => (2, 10, 4),
            2 => (3, 14, 4),
            _ => (4, 18, 4),
        };
        let header = u64::from(first) | (r.le(extra)? << 8);
        let mask = (1u64 << width) - 1;
        let regenerated = ((header >> 4) & mask) as usize;
        let compressed = ((header >> (4 + width)) & mask) as usize;
        if regenerated > MAX_BLOCK {
            return None;
        }
        let mut section = Bytes {
            data: r.take(compressed)?,
            at: 0,
        };
        if kind == 2 {
            self.huffman = Some(Huffman::read(&mut section)?);
        }
        let huffman = self.huffman.as_ref()?;
        let data = &section.data[section.at..];
        let mut out = Vec::with_capacity(regenerated);
        if streams == 1 {
            huffman.decode(data, regenerated, &mut out)?;
        } else {
            let jump = Bytes { data, at: 0 }.le(6)?;
            let sizes = [jump & 0xFFFF, (jump >> 16) & 0xFFFF, jump >> 32].map(|s| s as usize);
            // Three streams of a quarter (rounded up) each, the rest last.
            let each = regenerated.div_ceil(4);
            let last = regenerated.checked_sub(3 * each)?;
            let mut at = 6usize;
            for len in sizes {
                let end = at.checked_add(len)?;
                huffman.decode(data.get(at..end)?, each, &mut out)?;
                at = end;
            }
            huffman.decode(data.get(at..)?, last, &mut out)?;
        }
        Some(out)
    }
}

/// A forward reader of a byte slice.
struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Bytes<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let bytes = self.data.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(bytes)
    }

    fn byte(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    /// A little-endian field of `n` (at most 8) bytes.
    fn le(&mut self, n: usize) -> Option<u64> {
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(self.take(n)?);
        Some(u64::from_le_bytes(b))
    }
}

/// A backward bit stream (RFC 8878 4.1): read from its end, whose last
/// byte's highest set bit marks where the bits start. Past its beginning
/// it reads zeros and says so (`overflowed`), as the decoding of Huffman
/// weights needs.
struct Backward<'a> {
    data: &'a [u8],
    /// The bits not read yet: those below this position.
    left: i64,
}

impl<'a> Backward<'a> {
    fn new(data: &'a [u8]) -> Option<Self> {
        let last = *data.last()?;
        if last == 0 {
            return None;
        }
        let left = (data.len() as i64 - 1) * 8 + i64::from(7 - last.leading_zeros() as u8);
        Some(Self { data, left })
    }

    /// The next `n` (at most 56) bits, without consuming them.
    fn peek(&self, n: u8) -> u64 {
        let start = self.left - i64::from(n);
        let (from, width) = (start.max(0), self.left - start.max(0));
        if width <= 0 {
            return 0;
        }
        // The (at most 8) bytes holding bits from..left, little-endian.
        let lo = (from / 8) as usize;
        let mut word = [0u8; 8];
        let bytes = &self.data[lo..self.data.len().min(lo + 8)];
        word[..bytes.len()].copy_from_slice(bytes);
        let value = (u64::from_le_bytes(word) >> (from % 8)) & ((1u64 << width) - 1);
        value << (from - start)
    }

    fn read(&mut self, n: u8) -> Option<u64> {
        if n > 56 {
            return None;
        }
        let value = self.peek(n);
        self.left -= i64::from(n);
        Some(value)
    }

    fn overflowed(&self) -> bool {
        self.left < 0
    }

    fn done(&self) -> bool {
        self.left == 0
    }
}

/// An FSE decoding table (RFC 8878 4.1.1): per state, its symbol, the bits
/// to read and the base of the next state.
#[derive(Clone)]
struct Fse {
    log: u8,
    states: Vec<(u8, u8, u16)>,
}

impl Fse {
    /// The table of normalized `counts` (-1: a "less than 1" probability)
    /// at accuracy `log`.
    fn new(counts: &[i16], log: u8) -> Option<Self> {
        let size = 1usize << log;
        let mut states = vec![(0u8, 0u8, 0u16); size];
        let mut next = vec![0u32; counts.len()];
        let mut high = size;
        for (s, &c) in counts.iter().enumerate() {
            if c == -1 {
                high = high.checked_sub(1)?;
                states[high].0 = s as u8;
                next[s] = 1;
            } else {
                next[s] = c as u32;
            }
        }
        let (step, mask) = ((size >> 1) + (size >> 3) + 3, size - 1);
        let mut at = 0usize;
        for (s, &c) in counts.iter().enumerate() {
            for _ in 0..c.max(0) {
                states[at].0 = s as u8;
                at = (at + step) & mask;
                while at >= high {
                    at = (at + step) & mask;
                }
            }
        }
        if at != 0 {
            return None;
        }
        for state in &mut states {
            let n = &mut next[state.0 as usize];
            let bits = log - (31 - n.leading_zeros()) as u8;
            state.1 = bits;
            state.2 = ((*n << bits) as usize - size) as u16;
            *n += 1;
        }
        Some(Self { log, states })
    }

    /// The table of `RLE_Mode`: one symbol, no bits.
    fn rle(symbol: u8) -> Self {
        Self {
            log: 0,
            states: vec![(symbol, 0, 0)],
        }
    }

    fn init(&self, bits: &mut Backward) -> Option<usize> {
        Some(bits.read(self.log)? as usize)
    }

    fn symbol(&self, state: usize) -> u8 {
        self.states[state].0
    }

    fn next(&self, state: usize, bits: &mut Backward) -> Option<usize> {
        let (_, n, base) = self.states[state];
        Some(base as usize + bits.read(n)? as usize)
    }
}

/// A table description's normalized counts and accuracy log (RFC 8878
/// 4.1.1), at most `max_log` and `max_symbol`.
fn normalized(r: &mut Bytes, max_log: u8, max_symbol: usize) -> Option<(Vec<i16>, u8)> {
    let data = &r.data[r.at..];
    let mut bit = 0usize;
    let read = |bit: usize, n: usize| -> u32 {
        let mut v = 0u32;
        for i in 0..n {
            let b = bit + i;
            let byte = data.get(b / 8).copied().unwrap_or(0);
            v |= u32::from((byte >> (b % 8)) & 1) << i;
        }
        v
    };
    let log = (read(0, 4) + 5) as u8;
    bit += 4;
    if log > max_log {
        return None;
    }
    let mut remaining = (1i32 << log) + 1;
    let mut threshold = 1i32 << log;
    let mut width = log as usize + 1;
    let mut counts = Vec::new();
    while remaining > 1 {
        if counts.len() > max_symbol {
            return None;
        }
        let max = 2 * threshold - 1 - remaining;
        let low = read(bit, width - 1) as i32 & (threshold - 1);
        let value = if low < max {
            bit += width - 1;
            low
        } else {
            let mut v = read(bit, width) as i32 & (2 * threshold - 1);
            bit += width;
            if v >= threshold {
                v -= max;
            }
            v
        };
        let count = value - 1;
        remaining -= count.abs();
        counts.push(count as i16);
        if count == 0 {
            loop {
                let repeat = read(bit, 2) as usize;
                bit += 2;
                counts.extend(std::iter::repeat_n(0, repeat));
                if repeat != 3 {
                    break;
                }
            }
        }
        while remaining < threshold && threshold > 1 {
            width -= 1;
            threshold >>= 1;
        }
    }
    if remaining != 1 || counts.len() > max_symbol + 1 || bit.div_ceil(8) > data.len() {
        return None;
    }
    r.at += bit.div_ceil(8);
    Some((counts, log))
}

/// A Huffman decoding table (RFC 8878 4.2): indexed by the next `bits`
/// bits, the symbol and its code's length.
struct Huffman {
    bits: u8,
    table: Vec<(u8, u8)>,
}

impl Huffman {
    /// The tree description at `r` (RFC 8878 4.2.1).
    fn read(r: &mut Bytes) -> Option<Self> {
        let header = r.byte()? as usize;
        let mut weights = Vec::new();
        if header >= 128 {
            let n = header - 127;
            for b in r.take(n.div_ceil(2))? {
                weights.extend([b >> 4, b & 15]);
            }
            weights.truncate(n);
        } else {
            let mut section = Bytes {
                data: r.take(header)?,
                at: 0,
            };
            let (counts, log) = normalized(&mut section, 6, 255)?;
            let fse = Fse::new(&counts, log)?;
            let mut bits = Backward::new(&section.data[section.at..])?;
            let mut states = [fse.init(&mut bits)?, fse.init(&mut bits)?];
            // Two interleaved states until the stream is overrun; then the
            // other state's symbol is the last.
            'decoding: loop {
                for i in 0..2 {
                    if weights.len() >= 255 {
                        return None;
                    }
                    weights.push(fse.symbol(states[i]));
                    states[i] = fse.next(states[i], &mut bits)?;
                    if bits.overflowed() {
                        weights.push(fse.symbol(states[1 - i]));
                        break 'decoding;
                    }
                }
            }
        }
        Self::from_weights(weights)
    }

    /// The table of the weights given (the last symbol's is implied).
    fn from_weights(mut weights: Vec<u8>) -> Option<Self> {
        if weights.len() > 255 || weights.iter().any(|&w| w > 11) {
            return None;
        }
        let total: u32 = weights
            .iter()
            .filter(|&&w| w > 0)
            .map(|&w| 1 << (w - 1))
            .sum();
        if total == 0 {
            return None;
        }
        let bits = 32 - total.leading_zeros() as u8;
        let rest = (1u32 << bits) - total;
        if bits > 11 || !rest.is_power_of_two() {
            return None;
        }
        weights.push(rest.trailing_zeros() as u8 + 1);
        let mut table = Vec::with_capacity(1 << bits);
        for w in 1..=bits {
            for (s, _) in weights.iter().enumerate().filter(|&(_, &x)| x == w) {
                let entry = (s as u8, bits + 1 - w);
                table.extend(std::iter::repeat_n(entry, 1 << (w - 1)));
            }
        }
        (table.len() == 1 << bits).then_some(Self { bits, table })
    }

    /// `n` symbols of the stream `data`, which they must use up exactly.
    fn decode(&self, data: &[u8], n: usize, out: &mut Vec<u8>) -> Option<()> {
        let mut bits = Backward::new(data)?;
        for _ in 0..n {
            let (symbol, len) = self.table[bits.peek(self.bits) as usize];
            out.push(symbol);
            bits.read(len)?;
        }
        bits.done().then_some(())
    }
}

/// A sequence symbol kind: its predefined distribution and limits.
struct Kind {
    predefined: &'static [i16],
    predefined_log: u8,
    max_log: u8,
    max_symbol: usize,
}

impl Kind {
    const LITERALS: Kind = Kind {
        predefined: &[
            4, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 2, 1, 1,
            1, 1, 1, -1, -1, -1, -1,
        ],
        predefined_log: 6,
        max_log: 9,
        max_symbol: 35,
    };
    const MATCHES: Kind = Kind {
        predefined: &[
            1, 4, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
            1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1,
        ],
        predefined_log: 6,
        max_log: 9,
        max_symbol: 52,
    };
    const OFFSETS: Kind = Kind {
        predefined: &[
            1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1,
            -1,
        ],
        predefined_log: 5,
        max_log: 8,
        max_symbol: 31,
    };
}

/// Literal length codes: baseline and extra bits (RFC 8878 3.1.1.3.2.1.1).
const LITERAL_CODES: [(u32, u8); 36] = lengths(
    16,
    0,
    &[
        1, 1, 1, 1, 2, 2, 3, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
    ],
);
/// Match length codes: baseline and extra bits.
const MATCH_CODES: [(u32, u8); 53] = lengths(
    32,
    3,
    &[
        1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
    ],
);

/// A length code table: codes below `direct` are the length `code + add`,
/// each code from there a baseline (the previous one past its range) and
/// its `bits` of extra bits.
const fn lengths<const N: usize>(direct: usize, add: u32, bits: &[u8]) -> [(u32, u8); N] {
    let mut t = [(0, 0); N];
    let mut i = 0;
    while i < N {
        t[i] = if i < direct {
            (i as u32 + add, 0)
        } else {
            (t[i - 1].0 + (1 << t[i - 1].1), bits[i - direct])
        };
        i += 1;
    }
    t
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// About `n` bytes of text: words picked by a linear congruential
    /// generator (compressible, with matches at every distance).
    pub fn text(n: usize) -> Vec<u8> {
        const WORDS: [&str; 16] = [
            "device ", "global ", "module ", "charge ", "limit ", "context ", "0x1f ", "__nv ",
            "fatbin\n", "entry ", "cubin ", "ptx ", "load ", "unload ", "memory ", "sm_90 ",
        ];
        let (mut x, mut out) = (12345u64, Vec::new());
        while out.len() < n {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            out.extend_from_slice(WORDS[(x >> 60) as usize].as_bytes());
            if x & 0x100 != 0 {
                out.extend_from_slice((x >> 40).to_string().as_bytes());
            }
        }
        out.truncate(n);
        out
    }

    /// `n` bytes of noise (nothing to compress).
    pub fn noise(n: usize) -> Vec<u8> {
        let mut x = 99u64;
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 56) as u8
            })
            .collect()
    }

    /// `data` as a frame of raw blocks (a valid frame the tests make
    /// without a compressor).
    pub fn raw(data: &[u8]) -> Vec<u8> {
        let mut frame = MAGIC.to_le_bytes().to_vec();
        frame.push(0xE0); // an 8-byte content size, a single segment
        frame.extend_from_slice(&(data.len() as u64).to_le_bytes());
        let mut blocks = data.chunks(MAX_BLOCK).peekable();
        if blocks.peek().is_none() {
            frame.extend_from_slice(&[1, 0, 0]);
        }
        while let Some(block) = blocks.next() {
            let header = ((block.len() as u32) << 3) | u32::from(blocks.peek().is_none());
            frame.extend_from_slice(&header.to_le_bytes()[..3]);
            frame.extend_from_slice(block);
        }
        frame
    }

    /// A fixture made with the `zstd` CLI (v1.5.4) of the input named.
    macro_rules! frame {
        ($name:literal) => {
            include_bytes!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/testdata/zstd/",
                $name
            ))
        };
    }

    #[test]
    fn frames_of_the_zstd_cli_decode_to_their_input() {
        let text = text(150_000);
        // Two blocks of Huffman literals and FSE sequences, with and
        // without a checksum.
        assert_eq!(
            decompress(frame!("text.1.zst"), text.len()),
            Some(text.clone())
        );
        assert_eq!(
            decompress(frame!("text.19.zst"), text.len()),
            Some(text.clone())
        );
        assert_eq!(
            decompress(frame!("small.zst"), 3000).as_deref(),
            Some(&text[..3000])
        );
        // A single stream of literals; weights stored directly.
        assert_eq!(
            decompress(frame!("tiny.zst"), 400).as_deref(),
            Some(&text[..400])
        );
        let abcd = frame!("abcd");
        assert_eq!(
            decompress(frame!("abcd.zst"), 2000).as_deref(),
            Some(&abcd[..])
        );
        // Raw and RLE blocks.
        let long = [&text[..], &text[..]].concat();
        assert_eq!(decompress(&raw(&long), long.len()), Some(long));
        assert_eq!(decompress(&raw(&[]), 0), Some(vec![]));
        assert_eq!(decompress(frame!("noise.zst"), 20_000), Some(noise(20_000)));
        assert_eq!(
            decompress(frame!("zeros.zst"), 200_000),
            Some(vec![0; 200_000])
        );
    }

    #[test]
    fn a_compressed_cubin_is_read() {
        // `cubin::tests::cubin(&[(".nv.global", 1 << 30), (".nv.global.init", 64)])`
        // compressed with `zstd -19`.
        let elf = decompress(frame!("cubin.zst"), 358).expect("decoded");
        assert_eq!(
            crate::modules::cubin::globals(&elf[..]),
            Some((1 << 30) + 64)
        );
    }

    #[test]
    fn weights_stored_directly() {
        // Literals only: one Huffman stream of symbols 0 (weight 2), 1
        // (weight 1) and 2 (the weight implied: 1), "0 1 2 0" coded
        // 1 00 01 1 under the stream's marker bit.
        let frame = [
            0x28, 0xB5, 0x2F, 0xFD, 0x20, 4, 0x3D, 0, 0, 0x42, 0xC0, 0, 0x81, 0x21, 0x63, 0,
        ];
        assert_eq!(decompress(&frame, 4), Some(vec![0, 1, 2, 0]));
        let mut longer = frame;
        longer[14] = 0xC7; // a stream with a bit left over
        assert_eq!(decompress(&longer, 4), None);
    }

    #[test]
    fn what_nvcc_does_not_emit_is_refused() {
        let zeros = frame!("zeros.zst");
        assert_eq!(decompress(zeros, 199_999), None); // not its declared size
        let mut dictionary = zeros.to_vec();
        dictionary[4] |= 1;
        assert_eq!(decompress(&dictionary, 200_000), None);
        let mut skippable = zeros.to_vec();
        skippable[0] = 0x50;
        assert_eq!(decompress(&skippable, 200_000), None);
        let mut two = zeros.to_vec();
        two.extend_from_slice(zeros);
        assert_eq!(decompress(&two, 400_000), None);
        assert_eq!(decompress(&[], 0), None);
    }

    #[test]
    fn damaged_frames_never_exceed_their_bound() {
        // Every byte of small frames altered, every prefix of them: refused
        // or decoded to the size given, never more, never a panic.
        for (name, frame, size) in [
            ("small", &frame!("small.zst")[..], 3000),
            ("abcd", &frame!("abcd.zst")[..], 2000),
            ("tiny", &frame!("tiny.zst")[..], 400),
            ("cubin", &frame!("cubin.zst")[..], 358),
        ] {
            for at in 0..frame.len() {
                for flip in [0x01, 0x10, 0x80, 0xFF] {
                    let mut bad = frame.to_vec();
                    bad[at] ^= flip;
                    let out = decompress(&bad, size);
                    assert!(out.is_none_or(|o| o.len() == size), "{name} {at} {flip}");
                }
                assert_eq!(decompress(&frame[..at], size), None, "{name} prefix {at}");
            }
        }
    }

    #[test]
    fn a_frame_declaring_more_than_its_bound_is_refused_early() {
        // RLE blocks of 128 KiB each, far more than the bound: decoding
        // stops at the first block past it.
        let mut frame = vec![0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x00];
        let block = ((MAX_BLOCK as u32) << 3) | (1 << 1);
        for _ in 0..1000 {
            frame.extend_from_slice(&block.to_le_bytes()[..3]);
            frame.push(7);
        }
        assert_eq!(decompress(&frame, 1 << 20), None);
    }
}
