//! MD5 (RFC 1321), for one comparison only: S3's ETag of a single `PUT` is
//! the MD5 of its body, so a write whose condition was "lost" to a retry
//! below the layer can be recognised as our own.

const S: [u32; 64] = [
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9,
    14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10, 15,
    21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
];

/// The digest of the concatenated `chunks`.
pub(crate) fn digest<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> [u8; 16] {
    let k: [u32; 64] = std::array::from_fn(|i| {
        // floor(abs(sin(i + 1)) * 2^32), as the RFC defines the table.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let v = ((i as f64 + 1.0).sin().abs() * 4_294_967_296.0) as u32;
        v
    });
    let mut state: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];
    let mut block = [0u8; 64];
    let mut filled = 0usize;
    let mut total: u64 = 0;
    let feed = |bytes: &[u8], state: &mut [u32; 4], block: &mut [u8; 64], filled: &mut usize| {
        for &b in bytes {
            block[*filled] = b;
            *filled += 1;
            if *filled == 64 {
                compress(state, block, &k);
                *filled = 0;
            }
        }
    };
    for chunk in chunks {
        total = total.wrapping_add(chunk.len() as u64);
        feed(chunk, &mut state, &mut block, &mut filled);
    }
    let mut tail = vec![0x80u8];
    let pad = (55usize.wrapping_sub(filled)) % 64;
    tail.extend(std::iter::repeat_n(0u8, pad));
    tail.extend_from_slice(&total.wrapping_mul(8).to_le_bytes());
    feed(&tail, &mut state, &mut block, &mut filled);
    debug_assert_eq!(filled, 0);
    let mut out = [0u8; 16];
    for (i, word) in state.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&word.to_le_bytes());
    }
    out
}

fn compress(state: &mut [u32; 4], block: &[u8; 64], k: &[u32; 64]) {
    let m: [u32; 16] = std::array::from_fn(|i| {
        u32::from_le_bytes([
            block[i * 4],
            block[i * 4 + 1],
            block[i * 4 + 2],
            block[i * 4 + 3],
        ])
    });
    let [mut a, mut b, mut c, mut d] = *state;
    for i in 0..64 {
        let (f, g) = match i / 16 {
            0 => ((b & c) | (!b & d), i),
            1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
            2 => (b ^ c ^ d, (3 * i + 5) % 16),
            _ => (c ^ (b | !d), (7 * i) % 16),
        };
        let f = f.wrapping_add(a).wrapping_add(k[i]).wrapping_add(m[g]);
        a = d;
        d = c;
        c = b;
        b = b.wrapping_add(f.rotate_left(S[i]));
    }
    state[0] = state[0].wrapping_add(a);
    state[1] = state[1].wrapping_add(b);
    state[2] = state[2].wrapping_add(c);
    state[3] = state[3].wrapping_add(d);
}

/// The digest as S3 quotes it in an ETag: `"<32 hex digits>"`.
pub(crate) fn etag_of<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> String {
    use std::fmt::Write as _;
    let mut out = String::from("\"");
    for b in digest(chunks) {
        let _ = write!(out, "{b:02x}");
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::etag_of;

    #[test]
    fn the_rfc_1321_vectors() {
        let one = |s: &str| etag_of([s.as_bytes()]);
        assert_eq!(one(""), "\"d41d8cd98f00b204e9800998ecf8427e\"");
        assert_eq!(one("abc"), "\"900150983cd24fb0d6963f7d28e17f72\"");
        assert_eq!(
            one("12345678901234567890123456789012345678901234567890123456789012345678901234567890"),
            "\"57edf4a22be3c955ac49da2e2107b67a\""
        );
        // Chunked as a Buffer is: the same digest.
        let text = "The quick brown fox jumps over the lazy dog";
        let (a, b) = text.as_bytes().split_at(20);
        assert_eq!(etag_of([a, b]), "\"9e107d9d372bb6826bd81d3542a419d6\"");
    }
}
