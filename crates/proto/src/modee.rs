//! MODE E (extended block mode) framing, GFD.20 section "Extended Block Mode".
//!
//! ```text
//! +--------+----------------+----------------+
//! | desc u8| count u64 BE   | offset u64 BE  |   17 bytes, then <count> payload bytes
//! +--------+----------------+----------------+
//! ```
//! For an EOF block the offset field carries the number of EOD markers the
//! receiver must see ("EOD count expected"), not a file offset.

/// Length of an extended-block header on the wire.
pub const HEADER_LEN: usize = 17;

/// Descriptor bits of an extended block header (GFD.20).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Descriptor(pub u8);

impl Descriptor {
    /// End of record (legacy, never used for file transfers).
    pub const EOR: u8 = 0x80;
    /// End of file: the offset field carries the EOD count expected.
    pub const EOF: u8 = 0x40;
    /// Suspected errors in the block.
    pub const ERRORS: u8 = 0x20;
    /// The block is a restart marker.
    pub const RESTART: u8 = 0x10;
    /// End of data on this stream for the current transfer.
    pub const EOD: u8 = 0x08;
    /// The sender will close this connection after this block.
    pub const CLOSE: u8 = 0x04;

    /// Whether every bit of `flag` is set.
    pub fn has(self, flag: u8) -> bool {
        self.0 & flag == flag
    }
}

/// One extended-block header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockHeader {
    /// Descriptor flags.
    pub desc: Descriptor,
    /// Payload length in bytes (unused, 0, for EOF).
    pub count: u64,
    /// Absolute offset of the payload, or the EOD count for EOF blocks.
    pub offset: u64,
}

/// Errors found in a block header received from the network.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// Bits we do not implement (EOR, restart-marker blocks).
    #[error("unsupported block descriptor 0x{0:02x}")]
    Unsupported(u8),
    /// offset + count does not fit in 64 bits.
    #[error("block at offset {offset} with {count} bytes overflows")]
    Overflow {
        /// Offset field.
        offset: u64,
        /// Count field.
        count: u64,
    },
    /// An EOF block announcing an absurd number of EODs.
    #[error("EOF announces {0} data connections")]
    BadEodCount(u64),
    /// An EOF block with a count: its offset field is the EOD count, so
    /// bytes after it would have no offset (GCT sends 0 and ignores it).
    #[error("EOF block claims {0} payload bytes")]
    EofPayload(u64),
    /// A block its sender flags as holding suspected errors (0x20): its
    /// bytes are not to be written as data (GCT defines the bit and never
    /// sends it).
    #[error("the sender flags a block as holding suspected errors")]
    SuspectedErrors,
}

/// Upper bound on the EOD count an EOF block may announce.
pub const MAX_STREAMS: u64 = 1024;

/// Block sizes a receiver may ask for with `OPTS RETR BlockSize=n;`
/// (4 KiB to 16 MiB); anything else is refused.
pub const BLOCK_SIZE_OPTION: std::ops::RangeInclusive<u64> = 4096..=16 << 20;

impl BlockHeader {
    /// A data block.
    pub fn data(offset: u64, count: u64) -> Self {
        BlockHeader { desc: Descriptor(0), count, offset }
    }

    /// An EOD-only block (this stream is done for this transfer).
    pub fn eod() -> Self {
        BlockHeader { desc: Descriptor(Descriptor::EOD), count: 0, offset: 0 }
    }

    /// An EOF|EOD block announcing `streams` data connections.
    pub fn eof_eod(streams: u64) -> Self {
        BlockHeader { desc: Descriptor(Descriptor::EOF | Descriptor::EOD), count: 0, offset: streams }
    }

    /// Encode into the 17-byte wire form.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0] = self.desc.0;
        out[1..9].copy_from_slice(&self.count.to_be_bytes());
        out[9..17].copy_from_slice(&self.offset.to_be_bytes());
        out
    }

    /// Decode without validation (any 17 bytes form a header).
    pub fn decode(buf: &[u8; HEADER_LEN]) -> Self {
        let mut count = [0u8; 8];
        let mut offset = [0u8; 8];
        count.copy_from_slice(&buf[1..9]);
        offset.copy_from_slice(&buf[9..17]);
        BlockHeader { desc: Descriptor(buf[0]), count: u64::from_be_bytes(count), offset: u64::from_be_bytes(offset) }
    }

    /// Decode and check a header from an untrusted peer.
    pub fn parse(buf: &[u8; HEADER_LEN]) -> Result<Self, HeaderError> {
        let h = Self::decode(buf);
        h.validate()?;
        Ok(h)
    }

    /// Check the invariants a receiver relies on.
    pub fn validate(&self) -> Result<(), HeaderError> {
        let d = self.desc;
        if d.has(Descriptor::EOR) || d.has(Descriptor::RESTART) {
            return Err(HeaderError::Unsupported(d.0));
        }
        if d.has(Descriptor::ERRORS) {
            return Err(HeaderError::SuspectedErrors);
        }
        if d.has(Descriptor::EOF) {
            if self.offset == 0 || self.offset > MAX_STREAMS {
                return Err(HeaderError::BadEodCount(self.offset));
            }
            if self.count != 0 {
                return Err(HeaderError::EofPayload(self.count));
            }
            return Ok(());
        }
        if self.offset.checked_add(self.count).is_none() {
            return Err(HeaderError::Overflow { offset: self.offset, count: self.count });
        }
        Ok(())
    }

    /// Whether this block ends the data of its stream.
    pub fn is_eod(&self) -> bool {
        self.desc.has(Descriptor::EOD)
    }

    /// Whether this block carries the EOF count.
    pub fn is_eof(&self) -> bool {
        self.desc.has(Descriptor::EOF)
    }

    /// Whether the peer will close this connection.
    pub fn is_close(&self) -> bool {
        self.desc.has(Descriptor::CLOSE)
    }

    /// Payload bytes that follow on the wire (EOF blocks carry none).
    pub fn payload_len(&self) -> u64 {
        if self.is_eof() {
            0
        } else {
            self.count
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observed_gct_bytes_decode() {
        // conn1 of a 1 MiB + 5 B RETR with -p 4 (gridftp-notes 3.1).
        let mut b = [0u8; 17];
        b[0] = 0x48;
        b[16] = 4;
        let h = BlockHeader::parse(&b).unwrap();
        assert!(h.is_eof() && h.is_eod());
        assert_eq!(h.offset, 4);
        assert_eq!(h.payload_len(), 0);
    }

    #[test]
    fn hostile_headers_rejected() {
        let h = BlockHeader::data(u64::MAX - 1, 2);
        assert!(h.validate().is_err());
        assert!(BlockHeader::eof_eod(0).validate().is_err());
        assert!(BlockHeader::eof_eod(MAX_STREAMS + 1).validate().is_err());
        let with_payload = BlockHeader { count: 5, ..BlockHeader::eof_eod(1) };
        assert_eq!(with_payload.validate(), Err(HeaderError::EofPayload(5)));
        let r = BlockHeader { desc: Descriptor(Descriptor::RESTART), count: 0, offset: 0 };
        assert_eq!(r.validate(), Err(HeaderError::Unsupported(0x10)));
        let suspect = BlockHeader { desc: Descriptor(Descriptor::ERRORS), ..BlockHeader::data(0, 5) };
        assert_eq!(suspect.validate(), Err(HeaderError::SuspectedErrors));
    }
}
