//! Which pages of a linear memory the program ever wrote, from the kernel's page map
//! (`/proc/self/pagemap`: a page neither present nor swapped out was never written since it
//! was mapped, and reads as zeros), so that the counters' memory, whose matrix of indirect
//! calls is millions of cells and mostly never written, is read where it was (see
//! [`wprof_agent::entry_counts::EdgeTable::read_skipping`]): CPython's 10 MB matrix faulted
//! in 2,500 pages to find nothing in most of them.
//!
//! Where the page map cannot be read (not Linux, a kernel that refuses it), every page is
//! taken as written, and the memory is read whole.

/// The written pages of a stretch of memory.
#[derive(Debug)]
pub struct WrittenPages {
    /// The stretch's address.
    base: usize,
    /// The page size.
    page: usize,
    /// The first page's address.
    first: usize,
    /// For each page from the first, the index of the first written page at or after it
    /// (the count of pages if none).
    next_written: Vec<usize>,
}

impl WrittenPages {
    /// The pages of the `len` bytes at `base` (a memory of this process); `None` when the
    /// kernel does not say.
    pub fn of(base: *const u8, len: usize) -> Option<WrittenPages> {
        if len == 0 {
            return None;
        }
        let page = page_size()?;
        let base = base as usize;
        let first = base - base % page;
        let count = (base + len - first).div_ceil(page);
        let entries = page_map(first / page, count)?;
        // Present (bit 63) or swapped out (bit 62): written, or at least not known blank.
        let written = |entry: u64| entry & (3 << 62) != 0;
        let mut next_written = vec![count; count];
        let mut next = count;
        for i in (0..count).rev() {
            if written(entries[i]) {
                next = i;
            }
            next_written[i] = next;
        }
        Some(WrittenPages {
            base,
            page,
            first,
            next_written,
        })
    }

    /// For byte `offset` of the stretch: where the never-written pages it falls in end (an
    /// offset), if it falls in one.
    pub fn blank_until(&self, offset: u64) -> Option<u64> {
        let at = self.base.checked_add(usize::try_from(offset).ok()?)?;
        let index = (at - self.first) / self.page;
        let next = *self.next_written.get(index)?;
        (next > index).then(|| (self.first + next * self.page - self.base) as u64)
    }
}

#[cfg(target_os = "linux")]
fn page_size() -> Option<usize> {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).ok().filter(|&s| s > 0)
}

#[cfg(not(target_os = "linux"))]
fn page_size() -> Option<usize> {
    None
}

/// The page map's entries of `count` pages from page number `first`.
#[cfg(target_os = "linux")]
fn page_map(first: usize, count: usize) -> Option<Vec<u64>> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open("/proc/self/pagemap").ok()?;
    let mut bytes = vec![0u8; count * 8];
    file.read_exact_at(&mut bytes, (first as u64).checked_mul(8)?)
        .ok()?;
    Some(
        bytes
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
            .collect(),
    )
}

#[cfg(not(target_os = "linux"))]
fn page_map(_: usize, _: usize) -> Option<Vec<u64>> {
    None
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn pages_never_written_are_blank_and_written_ones_are_not() {
        let page = page_size().unwrap();
        let len = 64 * page;
        // SAFETY: a fresh private anonymous mapping of `len` bytes, unmapped below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        let bytes = base as *mut u8;
        // SAFETY: within the mapping.
        unsafe {
            *bytes.add(5 * page + 8) = 1;
            *bytes.add(40 * page) = 1;
        }
        let pages = WrittenPages::of(bytes, len).unwrap();
        let p = page as u64;
        assert_eq!(pages.blank_until(0), Some(5 * p));
        assert_eq!(pages.blank_until(3 * p + 17), Some(5 * p));
        assert_eq!(pages.blank_until(5 * p), None);
        assert_eq!(pages.blank_until(6 * p - 8), None);
        assert_eq!(pages.blank_until(6 * p), Some(40 * p));
        assert_eq!(pages.blank_until(40 * p + 8), None);
        assert_eq!(pages.blank_until(41 * p), Some(64 * p));
        // Past the stretch: not known.
        assert_eq!(pages.blank_until(64 * p), None);
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(base, len) };
    }
}
