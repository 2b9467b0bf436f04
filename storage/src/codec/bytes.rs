//! The primitives every layout is built of: unsigned LEB128 varints (a *padded* varint
//! carries redundant continuation bytes, always [`PADDED_VARINT`] long), zigzag for
//! signed deltas, and [`Reader`], a cursor that returns [`DecodeError`] on short input.

use super::DecodeError;

/// A varint padded to its maximum length, so a streamed write can patch it in place.
pub const PADDED_VARINT: usize = 10;

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Writes `v` in exactly [`PADDED_VARINT`] bytes (LEB128 allows redundant continuation).
pub fn put_padded_varint(out: &mut [u8], mut v: u64) {
    for (i, b) in out.iter_mut().enumerate().take(PADDED_VARINT) {
        let last = i == PADDED_VARINT - 1;
        *b = (v as u8 & 0x7f) | if last { 0 } else { 0x80 };
        v >>= 7;
    }
}

pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// A cursor over bytes that fails ([`DecodeError::Short`] when the bytes end,
/// [`DecodeError::Garbage`] when they cannot be what is asked) instead of panicking.
pub struct Reader<'a> {
    pub buf: &'a [u8],
    pub pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut v: u64 = 0;
        for i in 0..PADDED_VARINT {
            let b = *self.buf.get(self.pos).ok_or(DecodeError::Short)?;
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(DecodeError::Garbage("a varint overflows 64 bits"));
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError::Garbage("a varint overflows 64 bits"))
    }

    /// A varint used as a length or a count in memory.
    pub fn length(&mut self) -> Result<usize, DecodeError> {
        usize::try_from(self.varint()?).map_err(|_| DecodeError::Garbage("impossible length"))
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).ok_or(DecodeError::Short)?;
        let s = self.buf.get(self.pos..end).ok_or(DecodeError::Short)?;
        self.pos = end;
        Ok(s)
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        let b = *self.buf.get(self.pos).ok_or(DecodeError::Short)?;
        self.pos += 1;
        Ok(b)
    }

    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    pub fn str(&mut self, n: usize) -> Result<&'a str, DecodeError> {
        std::str::from_utf8(self.bytes(n)?).map_err(|_| DecodeError::Garbage("text is not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_pad() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(Reader::new(&b).varint(), Ok(v));
            let mut p = [0u8; PADDED_VARINT];
            put_padded_varint(&mut p, v);
            assert_eq!(Reader::new(&p).varint(), Ok(v));
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }

    #[test]
    fn short_and_overlong_input_are_typed_errors() {
        let mut b = Vec::new();
        put_varint(&mut b, u64::MAX);
        assert_eq!(
            Reader::new(&b[..b.len() - 1]).varint(),
            Err(DecodeError::Short)
        );
        assert!(matches!(
            Reader::new(&[0xff; 11]).varint(),
            Err(DecodeError::Garbage(_))
        ));
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u32(), Err(DecodeError::Short));
        assert_eq!(r.bytes(usize::MAX), Err(DecodeError::Short));
        assert_eq!(r.u16(), Ok(0x0201));
        assert!(matches!(
            Reader::new(&[0xc3]).str(1),
            Err(DecodeError::Garbage(_))
        ));
        assert_eq!(Reader::new(&[]).u8(), Err(DecodeError::Short));
    }
}
