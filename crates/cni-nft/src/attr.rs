//! Netlink attributes (NLAs): a small writer and a parser.
//!
//! Each attribute is `len: u16, type: u16` in host byte order followed by its payload, padded
//! to 4 bytes. nf_tables wants integers in network byte order (`NLA_BE32`/`NLA_BE64`) and
//! strings NUL-terminated; nested attributes carry `NLA_F_NESTED` like libmnl sets it.

use crate::sys::{NLA_F_NESTED, NLA_TYPE_MASK};
use crate::Error;

pub(crate) use cni_netlink::align;

/// The longest attribute its 16-bit length field can describe, header included.
pub(crate) const MAX_ATTR_LEN: usize = u16::MAX as usize;

/// Bytes of an attribute's header (`len`, `type`).
pub(crate) const ATTR_HEADER_LEN: usize = 4;

/// An attribute stream under construction.
///
/// An attribute whose length does not fit its 16-bit field is not written; the writer
/// remembers the first one, and [`AttrWriter::finish`] reports it as [`Error::TooLong`], so
/// nothing is ever sent truncated.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct AttrWriter {
    buf: Vec<u8>,
    oversize: Option<Oversize>,
}

/// The first attribute that did not fit: its type and the length it would have had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Oversize {
    pub(crate) attr: u16,
    pub(crate) len: usize,
}

impl Oversize {
    /// The error naming the request `what` this attribute belonged to.
    pub(crate) fn error(self, what: &str) -> Error {
        Error::TooLong {
            what: what.to_string(),
            attr: self.attr & NLA_TYPE_MASK,
            len: self.len,
        }
    }
}

impl AttrWriter {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Appends one attribute with a raw payload.
    pub(crate) fn bytes(&mut self, ty: u16, data: &[u8]) -> &mut Self {
        let total = ATTR_HEADER_LEN + data.len();
        let Ok(len) = u16::try_from(total) else {
            self.oversize.get_or_insert(Oversize {
                attr: ty,
                len: total,
            });
            return self;
        };
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(data);
        self.buf.resize(align(self.buf.len()), 0);
        self
    }

    /// A NUL-terminated string.
    pub(crate) fn str(&mut self, ty: u16, s: &str) -> &mut Self {
        let mut data = Vec::with_capacity(s.len() + 1);
        data.extend_from_slice(s.as_bytes());
        data.push(0);
        self.bytes(ty, &data)
    }

    #[cfg(test)]
    pub(crate) fn u8(&mut self, ty: u16, v: u8) -> &mut Self {
        self.bytes(ty, &[v])
    }

    /// A big-endian u16.
    pub(crate) fn be16(&mut self, ty: u16, v: u16) -> &mut Self {
        self.bytes(ty, &v.to_be_bytes())
    }

    /// A big-endian u32.
    pub(crate) fn be32(&mut self, ty: u16, v: u32) -> &mut Self {
        self.bytes(ty, &v.to_be_bytes())
    }

    /// A big-endian u64.
    pub(crate) fn be64(&mut self, ty: u16, v: u64) -> &mut Self {
        self.bytes(ty, &v.to_be_bytes())
    }

    /// A nested attribute whose body is written by `body`. An attribute inside it that did
    /// not fit is reported as this writer's own.
    pub(crate) fn nested(&mut self, ty: u16, body: impl FnOnce(&mut AttrWriter)) -> &mut Self {
        let mut inner = AttrWriter::new();
        body(&mut inner);
        if let Some(o) = inner.oversize {
            self.oversize.get_or_insert(o);
            return self;
        }
        self.bytes(ty | NLA_F_NESTED, &inner.buf)
    }

    /// Bytes written so far (every attribute padded to 4 bytes).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    /// The bytes written so far, or the first attribute that did not fit.
    pub(crate) fn written(&self) -> Result<&[u8], Oversize> {
        match self.oversize {
            Some(o) => Err(o),
            None => Ok(&self.buf),
        }
    }

    /// Forgets everything written, to encode the next item into the same buffer.
    pub(crate) fn clear(&mut self) {
        self.buf.clear();
        self.oversize = None;
    }

    /// The attribute stream of request `what`, or [`Error::TooLong`] naming the first
    /// attribute that did not fit.
    pub(crate) fn finish(self, what: &str) -> Result<Vec<u8>, Error> {
        match self.oversize {
            Some(o) => Err(o.error(what)),
            None => Ok(self.buf),
        }
    }

    #[cfg(test)]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The bytes, for tests whose attributes always fit.
    #[cfg(test)]
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        assert!(self.oversize.is_none(), "attribute too long in a test");
        self.buf
    }
}

/// One parsed attribute: its type (flags masked off) and payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Attr<'a> {
    pub(crate) ty: u16,
    pub(crate) data: &'a [u8],
}

impl<'a> Attr<'a> {
    /// The payload as a NUL-terminated (or unterminated) UTF-8 string.
    pub(crate) fn str(&self) -> Result<&'a str, Error> {
        let end = self
            .data
            .iter()
            .position(|b| *b == 0)
            .unwrap_or(self.data.len());
        std::str::from_utf8(&self.data[..end])
            .map_err(|_| Error::Decode(format!("attribute {} is not UTF-8", self.ty)))
    }

    pub(crate) fn be16(&self) -> Result<u16, Error> {
        Ok(u16::from_be_bytes(self.fixed()?))
    }

    pub(crate) fn be32(&self) -> Result<u32, Error> {
        Ok(u32::from_be_bytes(self.fixed()?))
    }

    pub(crate) fn be64(&self) -> Result<u64, Error> {
        Ok(u64::from_be_bytes(self.fixed()?))
    }

    pub(crate) fn u8(&self) -> Result<u8, Error> {
        Ok(u8::from_be_bytes(self.fixed()?))
    }

    fn fixed<const N: usize>(&self) -> Result<[u8; N], Error> {
        self.data.try_into().map_err(|_| {
            Error::Decode(format!(
                "attribute {} has {} bytes, expected {N}",
                self.ty,
                self.data.len()
            ))
        })
    }

    /// Parses the payload as nested attributes.
    pub(crate) fn nested(&self) -> Result<Vec<Attr<'a>>, Error> {
        parse(self.data)
    }
}

/// Splits an attribute stream. Truncated or malformed input is an error, never a panic.
pub(crate) fn parse(mut data: &[u8]) -> Result<Vec<Attr<'_>>, Error> {
    let mut out = Vec::new();
    while data.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([data[0], data[1]]));
        let ty = u16::from_ne_bytes([data[2], data[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > data.len() {
            return Err(Error::Decode(format!(
                "attribute length {len} does not fit the {} bytes left",
                data.len()
            )));
        }
        out.push(Attr {
            ty,
            data: &data[4..len],
        });
        data = &data[align(len).min(data.len())..];
    }
    Ok(out)
}

/// The first attribute of type `ty`, if any.
pub(crate) fn find<'a>(attrs: &[Attr<'a>], ty: u16) -> Option<Attr<'a>> {
    attrs.iter().copied().find(|a| a.ty == ty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_attribute_is_nul_terminated_and_padded() {
        let mut w = AttrWriter::new();
        w.str(1, "abc");
        // len 8 = 4 header + "abc\0"; already aligned.
        assert_eq!(w.as_bytes(), &[8, 0, 1, 0, b'a', b'b', b'c', 0]);
        let mut w = AttrWriter::new();
        w.str(3, "abcd");
        assert_eq!(
            w.as_bytes(),
            &[9, 0, 3, 0, b'a', b'b', b'c', b'd', 0, 0, 0, 0]
        );
    }

    #[test]
    fn nested_sets_flag_and_round_trips() {
        let mut w = AttrWriter::new();
        w.nested(4, |n| {
            n.be32(1, 0x0102_0304);
        });
        assert_eq!(w.as_bytes(), &[12, 0, 4, 0x80, 8, 0, 1, 0, 1, 2, 3, 4]);
        let attrs = parse(w.as_bytes()).unwrap();
        assert_eq!(attrs.len(), 1);
        assert_eq!(attrs[0].ty, 4);
        let inner = attrs[0].nested().unwrap();
        assert_eq!(inner[0].be32().unwrap(), 0x0102_0304);
    }

    #[test]
    fn an_attribute_over_the_16_bit_length_is_an_error_not_a_truncation() {
        let mut w = AttrWriter::new();
        w.bytes(1, &[7; MAX_ATTR_LEN - ATTR_HEADER_LEN]);
        assert_eq!(w.len(), align(MAX_ATTR_LEN), "the longest attribute fits");
        w.str(2, "after");
        w.bytes(3, &[0; MAX_ATTR_LEN - ATTR_HEADER_LEN + 1]);
        w.str(4, "later");
        let err = w
            .clone()
            .finish("add 9999 element(s) of set ip t s")
            .unwrap_err();
        match &err {
            Error::TooLong { what, attr, len } => {
                assert_eq!(what, "add 9999 element(s) of set ip t s");
                assert_eq!(*attr, 3);
                assert_eq!(*len, MAX_ATTR_LEN + 1);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(err.to_string().contains("65535"), "{err}");

        // Inside a nest, the nest does not fit either; the innermost cause is reported.
        let mut w = AttrWriter::new();
        w.nested(5, |n| {
            n.nested(6, |m| {
                m.bytes(7, &vec![0; 70_000]);
            });
        });
        assert!(w.len() == 0 && w.written().is_err());
        match w.finish("x").unwrap_err() {
            Error::TooLong { attr, len, .. } => assert_eq!((attr, len), (7, 70_004)),
            other => panic!("unexpected {other:?}"),
        }

        // A nest whose parts each fit but whose sum does not is refused as well.
        let mut w = AttrWriter::new();
        w.nested(8, |n| {
            for _ in 0..3 {
                n.bytes(1, &[0; 30_000]);
            }
        });
        match w.finish("y").unwrap_err() {
            Error::TooLong { attr, .. } => assert_eq!(attr, 8),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn malformed_input_is_an_error() {
        assert!(parse(&[200, 0, 1, 0, 0]).is_err());
        assert!(parse(&[2, 0, 1, 0]).is_err());
        let a = Attr { ty: 1, data: &[1] };
        assert!(a.be32().is_err());
    }
}
