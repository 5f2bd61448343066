//! The global allocator: mimalloc, called through its plain entry points whenever the
//! alignment asked for is one every mimalloc block already has. The `mimalloc` crate sends
//! every request through `mi_malloc_aligned`, and under callgrind that cost about 99
//! instructions an allocation on a site thread, 40% of them taking its over-allocating
//! general path; Voter's site makes about 11 allocations a call.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// mimalloc rounds blocks of 16 bytes or more to multiples of 16 and starts pages 16-byte
/// aligned (`MI_MAX_ALIGN_SIZE`); an 8-byte block is 8-byte aligned. So a block of at least
/// `align` bytes is aligned to `align` when `align` is at most this.
const BLOCK_ALIGN: usize = 16;

pub struct MiMalloc;

fn plain(align: usize, size: usize) -> bool {
    align <= BLOCK_ALIGN && align <= size
}

// SAFETY: each method forwards to the mimalloc function with the same contract; the plain
// ones are used only where their blocks meet the layout's alignment (see BLOCK_ALIGN), and
// mi_free takes blocks from either kind.
unsafe impl GlobalAlloc for MiMalloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if plain(layout.align(), layout.size()) {
            mi::mi_malloc(layout.size()).cast()
        } else {
            mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if plain(layout.align(), layout.size()) {
            mi::mi_zalloc(layout.size()).cast()
        } else {
            mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        mi::mi_free(ptr.cast::<c_void>());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if plain(layout.align(), new_size) {
            mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
        } else {
            mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
        }
    }
}

/// Hands the memory this thread's heap holds freed back to the system (over the memory
/// limit, a site calls it when it idles).
pub fn release_freed_memory() {
    // SAFETY: mi_collect only walks and purges the calling thread's own heap.
    unsafe { mi::mi_collect(true) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_meet_their_alignment_through_growth_and_zeroing() {
        let a = MiMalloc;
        for align in [1usize, 2, 4, 8, 16, 32, 64, 4096] {
            for size in [1usize, 3, 8, 12, 16, 24, 40, 100, 1000, 70_000] {
                let layout = Layout::from_size_align(size, align).unwrap();
                unsafe {
                    let p = a.alloc_zeroed(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    assert!(std::slice::from_raw_parts(p, size).iter().all(|&b| b == 0));
                    p.write_bytes(0xA5, size);
                    let q = a.realloc(p, layout, size * 3);
                    assert_eq!(q as usize % align, 0, "grown from {size}, align {align}");
                    assert!(std::slice::from_raw_parts(q, size).iter().all(|&b| b == 0xA5));
                    a.dealloc(q, Layout::from_size_align(size * 3, align).unwrap());
                    let r = a.alloc(layout);
                    assert_eq!(r as usize % align, 0);
                    a.dealloc(r, layout);
                }
            }
        }
    }
}
