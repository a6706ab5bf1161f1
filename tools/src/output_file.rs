//! Output files that are replaced only when the output is complete: a command that fails
//! halfway (a walk that cannot open its device, a spec the generator refuses) leaves the file
//! it was told to write as it was, even when that file is the topology it reads.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// A file written as `FILE.tmp` beside `FILE` and renamed over `FILE` by
/// [`ReplaceFile::commit`]; dropped without a commit, the temporary file is removed.
#[derive(Debug)]
pub struct ReplaceFile {
    dest: PathBuf,
    tmp: PathBuf,
    out: Option<BufWriter<File>>,
}

impl ReplaceFile {
    /// Create `dest.tmp` (in `dest`'s directory, so that the rename stays on one file
    /// system). Creating it first makes a bad path fail before any work is done; a `dest`
    /// that is a directory is refused then too (the rename over it would fail at the end).
    /// The error names the path it is about.
    pub fn create(dest: &Path) -> io::Result<Self> {
        let mut name = dest
            .file_name()
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} is not a file name", dest.display()),
                )
            })?
            .to_os_string();
        if dest.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!(
                    "{} is a directory: give the name of the file to write",
                    dest.display()
                ),
            ));
        }
        name.push(".tmp");
        let tmp = dest.with_file_name(name);
        let file = File::create(&tmp).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot create {}: {e}", tmp.display()))
        })?;
        Ok(ReplaceFile {
            dest: dest.to_path_buf(),
            tmp,
            out: Some(BufWriter::new(file)),
        })
    }

    /// The temporary file's path.
    #[cfg(test)]
    fn tmp_path(&self) -> &Path {
        &self.tmp
    }

    /// Flush the output and rename it over the destination; on failure the temporary file is
    /// removed and the destination left as it was.
    pub fn commit(mut self) -> io::Result<()> {
        // Only `commit` (which takes `self`) and `Drop` take `out`.
        let Some(out) = self.out.take() else {
            return Ok(());
        };
        let done = out
            .into_inner()
            .map_err(io::IntoInnerError::into_error)
            .and_then(|file| file.sync_all())
            .and_then(|()| fs::rename(&self.tmp, &self.dest));
        if done.is_err() {
            let _ = fs::remove_file(&self.tmp);
        }
        done
    }
}

impl Write for ReplaceFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.as_mut().map_or(Ok(0), |o| o.write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.as_mut().map_or(Ok(()), Write::flush)
    }
}

impl Drop for ReplaceFile {
    fn drop(&mut self) {
        if self.out.take().is_some() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_destination_changes_only_on_commit() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("net.topo");
        fs::write(&dest, "old\n").unwrap();
        let mut f = ReplaceFile::create(&dest).unwrap();
        f.write_all(b"new\n").unwrap();
        assert_eq!(f.tmp_path(), dir.path().join("net.topo.tmp"));
        assert_eq!(fs::read_to_string(&dest).unwrap(), "old\n");
        drop(f);
        assert_eq!(fs::read_to_string(&dest).unwrap(), "old\n");
        assert!(!dir.path().join("net.topo.tmp").exists());
        let mut f = ReplaceFile::create(&dest).unwrap();
        f.write_all(b"new\n").unwrap();
        f.commit().unwrap();
        assert_eq!(fs::read_to_string(&dest).unwrap(), "new\n");
        assert!(!dir.path().join("net.topo.tmp").exists());
    }

    #[test]
    fn a_directory_is_refused_before_anything_is_written() {
        let parent = tempfile::tempdir().unwrap();
        let dest = parent.path().join("out");
        fs::create_dir(&dest).unwrap();
        for d in [dest.clone(), parent.path().join("out/")] {
            let e = ReplaceFile::create(&d).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::IsADirectory, "{}", d.display());
            assert!(e.to_string().contains("is a directory"), "{e}");
            assert!(!parent.path().join("out.tmp").exists(), "{}", d.display());
        }
        assert!(dest.is_dir());
    }
}
