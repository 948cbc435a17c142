//! The search for the next byte a JSON string cannot hold as it is (`"`, `\\` or a
//! control character): where the access line's strings need escaping. A byte search, not
//! a parser: bodies are parsed by serde_json.

/// The position of the first byte from `from` on that a JSON string cannot hold as it is
/// (`"`, `\` or a control character), or the text's length. Sixteen bytes are tested a
/// step, as two words in registers, while they last, then eight, then one by one: strings
/// are mostly long runs of plain text (two words a step cost ~1.5 instructions a byte,
/// one word ~2.5, callgrind over 1 MiB).
#[inline]
pub(crate) fn next_special(bytes: &[u8], from: usize) -> usize {
    let Some(rest) = bytes.get(from..) else {
        return from;
    };
    let mut at = from;
    let mut pairs = rest.chunks_exact(16);
    for pair in pairs.by_ref() {
        let (low, high) = pair.split_at(8);
        let (low, high) = (special_marks(word(low)), special_marks(word(high)));
        if low | high != 0 {
            let lane = if low != 0 {
                low.trailing_zeros() / 8
            } else {
                8 + high.trailing_zeros() / 8
            };
            return at + lane as usize;
        }
        at += 16;
    }
    let mut words = pairs.remainder().chunks_exact(8);
    for chunk in words.by_ref() {
        let marks = special_marks(word(chunk));
        if marks != 0 {
            return at + (marks.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    for &byte in words.remainder() {
        if byte < 0x20 || byte == b'"' || byte == b'\\' {
            return at;
        }
        at += 1;
    }
    at
}

/// Eight bytes (a chunk of exactly eight) as one word, the first byte lowest.
#[inline]
fn word(chunk: &[u8]) -> u64 {
    <[u8; 8]>::try_from(chunk).map_or(0, u64::from_le_bytes)
}

/// The high bit of each byte of `word` set where that byte is `"`, `\` or below 0x20, or
/// comes after such a byte; the lowest one set marks the first. (A high bit set in a
/// byte of `(x - 1) & !x` marks a zero byte, and in `(x - 0x20) & !x` a byte below 0x20;
/// a borrow can mark a byte after a true mark too, never one before.)
#[inline]
fn special_marks(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let quote = word ^ (ONES * u64::from(b'"'));
    let backslash = word ^ (ONES * u64::from(b'\\'));
    ((quote.wrapping_sub(ONES) & !quote)
        | (backslash.wrapping_sub(ONES) & !backslash)
        | (word.wrapping_sub(ONES * 0x20) & !word))
        & HIGHS
}

#[cfg(test)]
mod tests {
    use super::next_special;

    #[test]
    fn the_first_special_byte_is_found_wherever_it_falls() {
        for special in (0u8..0x20).chain([b'"', b'\\']) {
            for length in 0..40 {
                for at in 0..=length {
                    let mut text = vec![b'a'; length];
                    // Bytes that a wider test could mistake: next to the specials' values.
                    for (i, byte) in text.iter_mut().enumerate() {
                        *byte = [b'!', b'#', b'[', b']', b' ', 0x7f, 0xc3, b'a'][i % 8];
                    }
                    if at < length {
                        text[at] = special;
                    }
                    assert_eq!(next_special(&text, 0), at.min(length), "{text:?}");
                    assert_eq!(next_special(&text, at.min(length)), at.min(length));
                }
            }
        }
    }
}
