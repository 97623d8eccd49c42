//! **Emulation only**: a device of a given read bandwidth, for `optio bench io`'s slow and fast
//! devices on one machine (`optio server --emulated-read-rate`). Every device of a machine
//! shares one disk and one page cache, so a slow device cannot be had from the hardware; this
//! [`Disk`] makes every read of object data (`read`, `read_prefix`, `read_at`) take the time a
//! device of `rate` bytes per second would take, first come first served, whether the page
//! cache holds the data or not. No seek time is modelled (a random read costs what a
//! sequential one of the same size does), writes are not slowed, and a local reader's
//! descriptor (`open_read`) reads unthrottled. A real deployment never uses it.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::disk::Disk;

/// The slowest emulated device, bytes per second.
pub const EMULATED_READ_RATE_MIN: u64 = 4096;

/// A disk whose reads are served at `rate` bytes per second, one after another.
#[derive(Debug)]
pub struct EmulatedDisk<D> {
    inner: D,
    bytes_per_sec: u64,
    /// When the device finishes what it has been given so far.
    free_at: Mutex<Instant>,
}

impl<D: Disk> EmulatedDisk<D> {
    /// `inner`, read at `bytes_per_sec` (at least [`EMULATED_READ_RATE_MIN`]).
    pub fn new(inner: D, bytes_per_sec: u64) -> EmulatedDisk<D> {
        EmulatedDisk {
            inner,
            bytes_per_sec: bytes_per_sec.max(EMULATED_READ_RATE_MIN),
            free_at: Mutex::new(Instant::now()),
        }
    }

    /// Waits until a device of this bandwidth would have read `bytes` after the reads queued
    /// before them (called on a blocking thread, as every disk call is).
    fn charge(&self, bytes: usize) {
        let service = Duration::from_secs_f64(bytes as f64 / self.bytes_per_sec as f64);
        let done = {
            let mut free_at = self.free_at.lock().expect("emulated disk lock");
            let start = (*free_at).max(Instant::now());
            *free_at = start + service;
            *free_at
        };
        if let Some(wait) = done.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
}

impl<D: Disk> Disk for EmulatedDisk<D> {
    fn sync_file(&self, file: &std::fs::File) -> io::Result<()> {
        self.inner.sync_file(file)
    }
    fn write_temp(&self, temp: &Path, parts: &[&[u8]], durable: bool) -> io::Result<()> {
        self.inner.write_temp(temp, parts, durable)
    }
    fn append(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.inner.append(path, bytes)
    }
    fn sync(&self, path: &Path) -> io::Result<()> {
        self.inner.sync(path)
    }
    fn publish(&self, temp: &Path, path: &Path) -> io::Result<()> {
        self.inner.publish(temp, path)
    }
    fn publish_if_absent(&self, temp: &Path, path: &Path) -> io::Result<()> {
        self.inner.publish_if_absent(temp, path)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let data = self.inner.read(path)?;
        self.charge(data.len());
        Ok(data)
    }
    fn read_into(&self, path: &Path, out: &mut Vec<u8>) -> io::Result<()> {
        self.inner.read_into(path, out)?;
        self.charge(out.len());
        Ok(())
    }
    fn read_prefix(&self, path: &Path, bytes: usize) -> io::Result<Vec<u8>> {
        let data = self.inner.read_prefix(path, bytes)?;
        self.charge(data.len());
        Ok(data)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.inner.remove(path)
    }
    fn remove_unsynced(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_unsynced(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn exchange(&self, a: &Path, b: &Path) -> io::Result<()> {
        self.inner.exchange(a, b)
    }
    fn data_ranges(&self, path: &Path, from: u64, to: u64) -> io::Result<Vec<(u64, u64)>> {
        self.inner.data_ranges(path, from, to)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir_all(path)
    }
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir(path)
    }
    fn list(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        self.inner.list(path)
    }
    fn write_sparse_temp(
        &self,
        temp: &Path,
        parts: &[(u64, &[u8])],
        len: u64,
        durable: bool,
    ) -> io::Result<()> {
        self.inner.write_sparse_temp(temp, parts, len, durable)
    }
    fn overwrite(&self, path: &Path, parts: &[&[u8]]) -> io::Result<()> {
        self.inner.overwrite(path, parts)
    }
    fn write_at(&self, path: &Path, parts: &[(u64, &[u8])], durable: bool) -> io::Result<()> {
        self.inner.write_at(path, parts, durable)
    }
    fn read_at(&self, path: &Path, ranges: &[(u64, usize)]) -> io::Result<Vec<Vec<u8>>> {
        let data = self.inner.read_at(path, ranges)?;
        self.charge(data.iter().map(Vec::len).sum());
        Ok(data)
    }
    fn punch(&self, path: &Path, offset: u64, len: u64) -> io::Result<()> {
        self.inner.punch(path, offset, len)
    }
    fn open_read(&self, path: &Path) -> io::Result<File> {
        self.inner.open_read(path)
    }
    fn sync_fs(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_fs(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::RealDisk;

    #[test]
    fn reads_take_the_time_of_the_emulated_bandwidth_one_after_another() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![1u8; 64 << 10]).unwrap();
        // 1 MiB/s: each 64 KiB read takes 62.5 ms of the device's time.
        let disk = std::sync::Arc::new(EmulatedDisk::new(RealDisk, 1 << 20));
        let started = Instant::now();
        let readers: Vec<_> = (0..4)
            .map(|_| {
                let (disk, path) = (disk.clone(), path.clone());
                std::thread::spawn(move || disk.read(&path).unwrap().len())
            })
            .collect();
        let read: usize = readers.into_iter().map(|r| r.join().unwrap()).sum();
        assert_eq!(read, 256 << 10);
        // Four reads of 64 KiB at 1 MiB/s: a quarter of a second, queued one after another.
        assert!(started.elapsed() >= Duration::from_millis(240), "{:?}", started.elapsed());
        // Writes and a local reader's descriptor take none of the device's time.
        let before = *disk.free_at.lock().unwrap();
        disk.write_temp(&dir.path().join("g"), &[&[2u8; 64 << 10]], false).unwrap();
        assert!(disk.open_read(&path).is_ok());
        assert_eq!(*disk.free_at.lock().unwrap(), before);
    }
}
