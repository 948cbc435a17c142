//! Where an upload's body waits while the gateway finds its model: in memory up to a
//! threshold, then in a temporary file that is unlinked as soon as it is made, so nothing
//! is left behind even by a crash. It is read back by position, as often as the request is
//! sent (a resend reads it again).

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;

/// Bytes held in memory before the body moves to a file.
const IN_MEMORY_BYTES: usize = 1 << 20;

/// An upload's body.
#[derive(Debug, Default)]
pub struct Spool {
    memory: Vec<u8>,
    file: Option<File>,
    len: u64,
}

impl Spool {
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends a chunk, moving to a file once memory holds `IN_MEMORY_BYTES`.
    pub fn write(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        if self.file.is_none() && self.memory.len() + chunk.len() > IN_MEMORY_BYTES {
            let mut file = temporary_file()?;
            file.write_all(&self.memory)?;
            self.memory = Vec::new();
            self.file = Some(file);
        }
        match &mut self.file {
            Some(file) => file.write_all(chunk)?,
            None => self.memory.extend_from_slice(chunk),
        }
        self.len += chunk.len() as u64;
        Ok(())
    }

    /// Fills `buf` from `offset` (fewer bytes at the end); the number of bytes read.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        let want = buf.len().min(self.len.saturating_sub(offset) as usize);
        match &self.file {
            Some(file) => {
                file.read_exact_at(&mut buf[..want], offset)?;
                Ok(want)
            }
            None => {
                let start = offset as usize;
                buf[..want].copy_from_slice(&self.memory[start..start + want]);
                Ok(want)
            }
        }
    }
}

/// A new file in the system's temporary directory, already unlinked.
fn temporary_file() -> std::io::Result<File> {
    let path = std::env::temp_dir().join(format!(
        "sluice-upload-{}-{:016x}",
        std::process::id(),
        rand::random::<u64>()
    ));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_body_moves_to_a_file_and_reads_back_whole() {
        let mut spool = Spool::default();
        let chunk: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
        for _ in 0..5 {
            spool.write(&chunk).unwrap();
        }
        assert!(spool.file.is_some(), "past 1 MiB the body is in a file");
        assert!(spool.memory.is_empty());
        assert_eq!(spool.len(), 1_500_000);
        let mut back = vec![0u8; 1_500_000];
        let mut at = 0;
        while at < back.len() {
            let end = (at + 70_000).min(back.len());
            at += spool.read_at(at as u64, &mut back[at..end]).unwrap();
        }
        assert!(back.chunks(300_000).all(|c| c == chunk.as_slice()));
    }
}
