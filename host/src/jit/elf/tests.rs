use super::*;
use crate::jit::test_support::minimal_cubin;

fn put_u16(bytes: &mut [u8], at: usize, value: u16) {
    bytes[at..at + 2].copy_from_slice(&value.to_le_bytes());
}
fn put_u32(bytes: &mut [u8], at: usize, value: u32) {
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
}
fn put_u64(bytes: &mut [u8], at: usize, value: u64) {
    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
}
fn get_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// Where section `index`'s header starts in [`minimal_cubin`].
fn section_header(index: usize) -> usize {
    get_u64(&minimal_cubin(), 40) as usize + index * 64
}

/// `check_cubin` on `bytes` after `edit`, which must fail with a message containing `expected`.
fn refused(edit: impl FnOnce(&mut Vec<u8>), expected: &str) {
    let mut bytes = minimal_cubin();
    edit(&mut bytes);
    match check_cubin(&bytes) {
        Ok(()) => panic!("accepted a cubin that should fail with `{expected}`"),
        Err(problem) => assert!(problem.contains(expected), "expected `{expected}` in: {problem}"),
    }
}

#[test]
fn the_minimal_cubin_is_accepted() {
    check_cubin(&minimal_cubin()).unwrap();
    // Bytes after everything the headers describe (weft's trailer sits there on disk) are allowed.
    let mut padded = minimal_cubin();
    padded.extend_from_slice(b"trailing bytes");
    check_cubin(&padded).unwrap();
}

#[test]
fn truncated_images_are_refused() {
    refused(|b| b.clear(), "shorter than an ELF header");
    refused(|b| b.truncate(63), "shorter than an ELF header");
    // Cut inside the section header table, and inside a section's data.
    refused(|b| b.truncate(b.len() - 1), "section header table");
    refused(|b| b.truncate(section_header(0) - 1), "outside the file");
    let full = minimal_cubin();
    for len in 0..full.len() {
        assert!(check_cubin(&full[..len]).is_err(), "a cubin cut to {len} of {} bytes was accepted", full.len());
    }
}

#[test]
fn the_identity_and_machine_are_checked() {
    refused(|b| b[0] = b'E', "magic");
    refused(|b| b[1..4].copy_from_slice(b"ELG"), "magic");
    refused(|b| b[4] = 1, "not 64-bit");
    refused(|b| b[5] = 2, "not little-endian");
    refused(|b| b[6] = 0, "version");
    refused(|b| put_u32(b, 20, 2), "version");
    refused(|b| put_u16(b, 18, 62), "e_machine 62, not EM_CUDA (190)");
    refused(|b| put_u16(b, 16, 3), "e_type 3");
    refused(|b| put_u16(b, 52, 52), "e_ehsize");
}

#[test]
fn tables_outside_the_file_are_refused() {
    refused(|b| put_u64(b, 40, 1 << 40), "section header table");
    refused(|b| put_u64(b, 32, 1 << 40), "program header table");
    refused(|b| put_u16(b, 60, 200), "section header table");
    refused(|b| put_u16(b, 56, 300), "program header table");
    refused(|b| put_u16(b, 58, 40), "e_shentsize 40");
    refused(|b| put_u16(b, 54, 32), "e_phentsize 32");
    refused(|b| put_u16(b, 60, 0), "e_shnum is 0");
    refused(|b| put_u16(b, 60, 0xff00), "reserved range");
    let len = minimal_cubin().len() as u64;
    // A section whose data runs past the end; a program header's segment likewise.
    refused(|b| put_u64(b, section_header(4) + 32, len), "section 4");
    refused(|b| put_u64(b, 64 + 32, len), "program header 0");
    refused(|b| put_u64(b, 64 + 40, 1), "more bytes in the file");
}

#[test]
fn offsets_that_overflow_are_refused_not_wrapped() {
    refused(|b| put_u64(b, 40, u64::MAX - 10), "section header table");
    refused(|b| put_u64(b, 32, u64::MAX - 10), "program header table");
    refused(
        |b| {
            let at = section_header(4);
            put_u64(b, at + 24, u64::MAX - 3);
            put_u64(b, at + 32, 16);
        },
        "overflows",
    );
    refused(|b| put_u64(b, 64 + 8, u64::MAX), "overflows");
}

#[test]
fn string_tables_are_bounded_and_terminated() {
    refused(|b| put_u16(b, 62, 5), "e_shstrndx 5");
    refused(|b| put_u16(b, 62, 3), "not a string table");
    // A section name starting past the end of the name table.
    refused(|b| put_u32(b, section_header(4), 4096), "section 4's name");
    // The name table's last byte is not NUL: a name could run off its end.
    refused(
        |b| {
            let at = section_header(1);
            let end = (get_u64(b, at + 24) + get_u64(b, at + 32)) as usize;
            b[end - 1] = b'x';
        },
        "does not end with a NUL",
    );
    // The symbol table's string table: absent, not a string table, or a name outside it.
    refused(|b| put_u32(b, section_header(3) + 40, 9), "does not exist");
    refused(|b| put_u32(b, section_header(3) + 40, 4), "not a string table");
    refused(
        |b| {
            let symbols = get_u64(b, section_header(3) + 24) as usize;
            put_u32(b, symbols + 24, 3);
        },
        "symbol 1 of section 3 has a name outside",
    );
    refused(
        |b| {
            let symbols = get_u64(b, section_header(3) + 24) as usize;
            put_u16(b, symbols + 24 + 6, 77);
        },
        "section 77, which does not exist",
    );
    refused(|b| put_u64(b, section_header(3) + 56, 16), "ELF64 symbols are 24 bytes");
    refused(|b| put_u32(b, section_header(0) + 4, 1), "null section");
    refused(
        |b| {
            put_u32(b, section_header(4) + 4, 9); // SHT_REL
            put_u32(b, section_header(4) + 40, 9);
        },
        "relocation section 4 links to section 9",
    );
}

/// Random damage never panics: every answer is Ok or a reason. (Deterministic: a fixed xorshift sequence.)
#[test]
fn random_damage_never_panics() {
    let original = minimal_cubin();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut refusals = 0;
    for _ in 0..20_000 {
        let mut bytes = original.clone();
        for _ in 0..=next() % 4 {
            let at = (next() % bytes.len() as u64) as usize;
            bytes[at] = next() as u8;
        }
        if check_cubin(&bytes).is_err() {
            refusals += 1;
        }
    }
    // Most single-byte changes land in code or padding and are harmless; header and table damage is caught.
    assert!(refusals > 1000, "only {refusals} of 20000 damaged images were refused");
}
