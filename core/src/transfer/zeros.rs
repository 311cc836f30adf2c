//! Finding the data in a chunk for thin provisioning: the ranges that hold any non-zero byte.

use std::ops::Range;

/// Granularity of the zero test: blocks of this size, aligned to the image offset, that are all
/// zero are not written. 4 KiB matches `rbd import --sparse-size 4K` and bluestore's allocation unit.
pub const BLOCK: usize = 4096;

/// True when every byte is zero; word-at-a-time so it runs at memory speed.
fn is_zero(bytes: &[u8]) -> bool {
    // SAFETY: any byte pattern is a valid u64; align_to only splits off unaligned ends.
    let (head, words, tail) = unsafe { bytes.align_to::<u64>() };
    head.iter().all(|&b| b == 0)
        && tail.iter().all(|&b| b == 0)
        && words
            .chunks(8)
            .all(|c| c.iter().fold(0, |acc, &w| acc | w) == 0)
}

/// The ranges of `chunk` (written at image offset `offset`) that contain data, merged where they
/// touch, split on block boundaries of the image.
pub(crate) fn data_ranges(chunk: &[u8], offset: u64) -> Vec<Range<usize>> {
    let mut ranges: Vec<Range<usize>> = Vec::new();
    // The first block may be partial: it ends at the next image block boundary.
    let misalignment = (offset % BLOCK as u64) as usize;
    let mut start = 0;
    let mut end = (BLOCK - misalignment).min(chunk.len());
    while start < chunk.len() {
        if !is_zero(&chunk[start..end]) {
            match ranges.last_mut() {
                Some(last) if last.end == start => last.end = end,
                _ => ranges.push(start..end),
            }
        }
        start = end;
        end = (end + BLOCK).min(chunk.len());
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_zero_sees_a_single_byte_anywhere() {
        let mut buf = vec![0u8; 3 * BLOCK + 13];
        assert!(is_zero(&buf));
        for at in [0, 1, 7, 8, 63, 64, BLOCK, buf.len() - 1] {
            buf[at] = 1;
            assert!(!is_zero(&buf), "byte at {at}");
            assert!(!is_zero(&buf[at..at + 1]));
            buf[at] = 0;
        }
        assert!(is_zero(&[]));
    }

    #[test]
    fn all_zero_chunk_has_no_data() {
        assert!(data_ranges(&vec![0u8; 5 * BLOCK], 0).is_empty());
    }

    #[test]
    fn adjacent_data_blocks_merge() {
        let mut buf = vec![0u8; 4 * BLOCK];
        buf[BLOCK] = 1;
        buf[2 * BLOCK + 5] = 1;
        assert_eq!(data_ranges(&buf, 0), vec![BLOCK..3 * BLOCK]);
    }

    #[test]
    fn blocks_follow_image_alignment_not_chunk_start() {
        // Chunk starts 100 bytes before an image block boundary.
        let offset = BLOCK as u64 - 100;
        let mut buf = vec![0u8; 100 + 2 * BLOCK];
        buf[99] = 1; // in the partial first block
        buf[100 + BLOCK] = 1; // first byte of the second full block
        assert_eq!(
            data_ranges(&buf, offset),
            vec![0..100, 100 + BLOCK..100 + 2 * BLOCK]
        );
    }

    #[test]
    fn short_and_unaligned_chunks() {
        assert_eq!(data_ranges(&[0, 0, 1], 5), vec![0..3]);
        assert_eq!(data_ranges(&[1], 0), vec![0..1]);
        assert!(data_ranges(&[], 0).is_empty());
    }

    #[test]
    fn ranges_cover_exactly_the_non_zero_bytes() {
        // Pseudo-random sparse pattern: every non-zero byte lies in a range, every range block has one.
        let mut state = 0x2545F4914F6CDD1Du64;
        let mut buf = vec![0u8; 64 * BLOCK + 777];
        for block in buf.chunks_mut(BLOCK / 2) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            if state % 3 == 0 {
                block[(state % block.len() as u64) as usize] = 0xAB;
            }
        }
        let offset = 1234;
        let ranges = data_ranges(&buf, offset);
        let covered = |i: usize| ranges.iter().any(|r| r.contains(&i));
        assert!(buf.iter().enumerate().all(|(i, &b)| b == 0 || covered(i)));
        for r in &ranges {
            assert!((offset + r.start as u64) % BLOCK as u64 == 0 || r.start == 0);
            assert!((offset + r.end as u64) % BLOCK as u64 == 0 || r.end == buf.len());
        }
    }
}
