//! Lower-case hexadecimal written into places of a known size: generated request IDs,
//! trace and span IDs, the shared store's lease ids. Written by hand because `format!`
//! with a width costs more than the work around it on these paths, and eight bytes at a
//! time because a digit at a time cost ~500 instructions for a trace ID (a request at
//! `sample_ratio: 0` writes four such IDs).

/// Writes `bytes` in lower-case hex into `out`, two digits a byte, as many bytes as `out`
/// has room for.
pub fn write_lower(out: &mut [u8], bytes: &[u8]) {
    let count = bytes.len().min(out.len() / 2);
    let (out, bytes) = (&mut out[..2 * count], &bytes[..count]);
    let mut outs = out.chunks_exact_mut(16);
    let mut ins = bytes.chunks_exact(8);
    for (digits, eight) in (&mut outs).zip(&mut ins) {
        let mut word = [0; 8];
        word.copy_from_slice(eight);
        digits.copy_from_slice(&spread(u64::from_be_bytes(word)).to_be_bytes());
    }
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, &byte) in outs
        .into_remainder()
        .chunks_exact_mut(2)
        .zip(ins.remainder())
    {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0xf)];
    }
}

/// The 16 lower-case hex digits of `n` (a span ID, a generated ID's half).
pub fn digits_u64(n: u64) -> [u8; 16] {
    spread(n).to_be_bytes()
}

/// The 32 lower-case hex digits of `n` (a trace ID, a generated request ID).
pub fn digits_u128(n: u128) -> [u8; 32] {
    let mut out = [0; 32];
    out[..16].copy_from_slice(&digits_u64((n >> 64) as u64));
    out[16..].copy_from_slice(&digits_u64(n as u64));
    out
}

/// The 16 hex digits of `word` as the bytes of a `u128`, the first digit highest.
fn spread(word: u64) -> u128 {
    const LANES: u128 = u128::from_be_bytes([1; 16]);
    // Each step moves the upper half of every lane into a lane of its own: 32-bit halves,
    // then 16, 8 and 4 bits, until each byte holds one nibble.
    let mut v = u128::from(word);
    v = ((v << 32) | v) & 0x0000_0000_ffff_ffff_0000_0000_ffff_ffff;
    v = ((v << 16) | v) & 0x0000_ffff_0000_ffff_0000_ffff_0000_ffff;
    v = ((v << 8) | v) & 0x00ff_00ff_00ff_00ff_00ff_00ff_00ff_00ff;
    v = ((v << 4) | v) & (LANES * 0x0f);
    // A nibble of 10 or more gets 6 added into its 0x10 bit: `a` is 39 past `9` + 1.
    let letters = ((v + LANES * 6) >> 4) & LANES;
    v + LANES * b'0' as u128 + letters * 39
}

#[cfg(test)]
mod tests {
    use super::{digits_u128, digits_u64, write_lower};

    #[test]
    fn bytes_are_written_as_format_writes_them() {
        for n in [0u64, 1, 0xf, 0x10, 0xd8a0_c451_fc3a_8b4d, u64::MAX] {
            let mut out = [0u8; 16];
            write_lower(&mut out, &n.to_be_bytes());
            assert_eq!(out, *format!("{n:016x}").as_bytes());
        }
        // Every byte value, in every position of a word and of the tail after one.
        let bytes: Vec<u8> = (0..=255).chain((0..=255).rev()).collect();
        for len in [1, 7, 8, 9, 16, 17, 512] {
            let mut out = vec![0u8; 2 * len];
            write_lower(&mut out, &bytes[..len]);
            let expected: String = bytes[..len].iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(out, expected.as_bytes(), "{len} bytes");
        }
        for n in [
            0u128,
            1,
            0xabc,
            u128::MAX,
            0x0af7_6519_16cd_43dd_8448_eb21_1c80_319c,
        ] {
            assert_eq!(digits_u128(n), *format!("{n:032x}").as_bytes());
            assert_eq!(
                digits_u64(n as u64),
                *format!("{:016x}", n as u64).as_bytes()
            );
        }
        // A place shorter than the bytes takes what fits.
        let mut short = [b'.'; 3];
        write_lower(&mut short, &[0xab, 0xcd]);
        assert_eq!(&short, b"ab.");
        let mut odd = [b'.'; 19];
        write_lower(&mut odd, &[0x12; 10]);
        assert_eq!(&odd, b"121212121212121212.");
    }
}
