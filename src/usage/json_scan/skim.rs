//! Byte-level helpers of [`super::JsonScan`]: what a byte outside strings is, and where
//! a string ends.

/// The offset of the first `"` or `\\` in `bytes`. Most strings in an answer are a few
/// bytes long: eight bytes at a time in a register for the first 32, then `memchr2`,
/// whose set-up costs more than a short string does.
pub(in crate::usage) fn quote_or_backslash(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    const QUOTES: u64 = u64::from_ne_bytes([b'"'; 8]);
    const BACKSLASHES: u64 = u64::from_ne_bytes([b'\\'; 8]);
    // The high bit of each zero byte of `word` (and maybe of bytes after the first zero,
    // never before it).
    let zeros = |word: u64| word.wrapping_sub(ONES) & !word & HIGHS;
    let mut at = 0;
    while at < 32 {
        let Some(chunk) = bytes.get(at..at + 8) else {
            break;
        };
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_le_bytes(word);
        let found = zeros(word ^ QUOTES) | zeros(word ^ BACKSLASHES);
        if found != 0 {
            return Some(at + found.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    if at < 32 {
        // Fewer than eight bytes left.
        return bytes[at..]
            .iter()
            .position(|&b| b == b'"' || b == b'\\')
            .map(|offset| at + offset);
    }
    memchr::memchr2(b'"', b'\\', &bytes[at..]).map(|offset| at + offset)
}

/// What a byte outside strings is, for [`super::JsonScan::feed`].
#[derive(Clone, Copy)]
pub(super) enum Skimmed {
    /// Whitespace: moves the offset only.
    Blank,
    /// Part of a number, `true`, `false` or `null` (or a stray byte): ends a scalar.
    Scalar,
    /// Opens a string.
    Quote,
    /// A bracket, colon or comma.
    Structure,
}

/// [`Skimmed`] for every byte.
pub(super) static SKIMMED: [Skimmed; 256] = {
    let mut table = [Skimmed::Scalar; 256];
    let mut byte = 0;
    while byte < 256 {
        table[byte] = match byte as u8 {
            b if b.is_ascii_whitespace() => Skimmed::Blank,
            b'"' => Skimmed::Quote,
            b'{' | b'[' | b'}' | b']' | b':' | b',' => Skimmed::Structure,
            _ => Skimmed::Scalar,
        };
        byte += 1;
    }
    table
};
