//! Block files: appending frames, reading them back.

/// A record's payload as a stream; the CRC is checked when the end is reached.
pub struct RecordReader {}

impl RecordReader {
    pub fn meta(&self) -> &crate::RecordMeta {
        todo!()
    }
}

impl std::io::Read for RecordReader {
    fn read(&mut self, _buf: &mut [u8]) -> std::io::Result<usize> {
        todo!()
    }
}
