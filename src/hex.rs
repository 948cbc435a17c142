//! Lower-case hexadecimal written into places of a known size: generated request IDs,
//! trace and span IDs, the shared store's lease ids. Written by hand because `format!`
//! with a width costs more than the work around it on these paths.

/// Writes `bytes` in lower-case hex into `out`, two digits a byte, as many bytes as `out`
/// has room for.
pub fn write_lower(out: &mut [u8], bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, &byte) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0xf)];
    }
}

#[cfg(test)]
mod tests {
    use super::write_lower;

    #[test]
    fn bytes_are_written_as_format_writes_them() {
        for n in [0u64, 1, 0xf, 0x10, 0xd8a0_c451_fc3a_8b4d, u64::MAX] {
            let mut out = [0u8; 16];
            write_lower(&mut out, &n.to_be_bytes());
            assert_eq!(out, *format!("{n:016x}").as_bytes());
        }
        // A place shorter than the bytes takes what fits.
        let mut short = [b'.'; 3];
        write_lower(&mut short, &[0xab, 0xcd]);
        assert_eq!(&short, b"ab.");
    }
}
