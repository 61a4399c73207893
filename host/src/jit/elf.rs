//! A structural check of cubins (CUDA ELF images) before the driver parses them.
//!
//! `cuModuleLoadData` trusts its input: a cubin whose tables point outside the buffer can crash the process
//! inside the driver. A cache entry whose checksum matches can still hold such bytes (written by a broken nvcc,
//! or by anyone who can write the cache), so every cubin is checked here first: the header, the section and
//! program header tables, every section's extent, and the string tables that names index into. This is not a
//! full ELF validator: it checks exactly what makes reading the file go out of bounds.

use std::ops::Range;

/// `EM_CUDA`: the machine of every cubin.
pub(crate) const EM_CUDA: u16 = 190;
const HEADER_LEN: usize = 64;
const SECTION_HEADER_LEN: usize = 64;
const PROGRAM_HEADER_LEN: usize = 56;
const SYMBOL_LEN: u64 = 24;

const SHT_NULL: u32 = 0;
const SHT_SYMTAB: u32 = 2;
const SHT_STRTAB: u32 = 3;
const SHT_RELA: u32 = 4;
const SHT_NOBITS: u32 = 8;
const SHT_REL: u32 = 9;
const SHT_DYNSYM: u32 = 11;
/// Section indices from here up are reserved (extended numbering, absolute symbols, …).
const SHN_LORESERVE: u16 = 0xff00;
const PT_LOAD: u32 = 1;

/// Checks that `bytes` is a well-formed 64-bit little-endian CUDA ELF image whose tables all lie inside it;
/// the error says what is wrong, for a log line or an error message.
pub(crate) fn check_cubin(bytes: &[u8]) -> Result<(), String> {
    let file = Reader(bytes);
    if bytes.len() < HEADER_LEN {
        return Err(format!("{} bytes, shorter than an ELF header ({HEADER_LEN})", bytes.len()));
    }
    if &bytes[..4] != b"\x7fELF" {
        return Err("no ELF magic at the start".into());
    }
    if bytes[4] != 2 {
        return Err(format!("ELF class {}, not 64-bit (2)", bytes[4]));
    }
    if bytes[5] != 1 {
        return Err(format!("ELF data encoding {}, not little-endian (1)", bytes[5]));
    }
    if bytes[6] != 1 || file.u32(20)? != 1 {
        return Err("ELF version is not 1".into());
    }
    let machine = file.u16(18)?;
    if machine != EM_CUDA {
        return Err(format!("e_machine {machine}, not EM_CUDA ({EM_CUDA})"));
    }
    let kind = file.u16(16)?;
    if kind != 1 && kind != 2 {
        return Err(format!("e_type {kind}, neither relocatable (1) nor executable (2)"));
    }
    if usize::from(file.u16(52)?) != HEADER_LEN {
        return Err(format!("e_ehsize {}, not {HEADER_LEN}", file.u16(52)?));
    }
    check_program_headers(&file)?;
    check_sections(&file)
}

fn check_program_headers(file: &Reader<'_>) -> Result<(), String> {
    let (offset, entry_len, count) = (file.u64(32)?, file.u16(54)?, file.u16(56)?);
    if count == 0 {
        return Ok(());
    }
    if usize::from(entry_len) != PROGRAM_HEADER_LEN {
        return Err(format!("e_phentsize {entry_len}, not {PROGRAM_HEADER_LEN}"));
    }
    let table = file.range(offset, u64::from(count) * PROGRAM_HEADER_LEN as u64, "the program header table")?;
    for index in 0..usize::from(count) {
        let at = table.start + index * PROGRAM_HEADER_LEN;
        let (kind, file_offset, file_size, memory_size) =
            (file.u32(at)?, file.u64(at + 8)?, file.u64(at + 32)?, file.u64(at + 40)?);
        file.range(file_offset, file_size, &format!("program header {index}'s segment"))?;
        if kind == PT_LOAD && file_size > memory_size {
            return Err(format!("program header {index} has more bytes in the file ({file_size}) than in memory"));
        }
    }
    Ok(())
}

/// One section header's fields that the checks need.
#[derive(Clone, Copy)]
struct Section {
    name: u32,
    kind: u32,
    offset: u64,
    size: u64,
    link: u32,
    entry_len: u64,
}

fn check_sections(file: &Reader<'_>) -> Result<(), String> {
    let (offset, entry_len, count, names_index) = (file.u64(40)?, file.u16(58)?, file.u16(60)?, file.u16(62)?);
    if count == 0 {
        // Either no sections at all (a cubin always has some) or extended numbering (never used by nvcc).
        return Err("no section header table (e_shnum is 0)".into());
    }
    if count >= SHN_LORESERVE {
        return Err(format!("e_shnum {count} is in the reserved range"));
    }
    if usize::from(entry_len) != SECTION_HEADER_LEN {
        return Err(format!("e_shentsize {entry_len}, not {SECTION_HEADER_LEN}"));
    }
    let table = file.range(offset, u64::from(count) * SECTION_HEADER_LEN as u64, "the section header table")?;
    let sections: Vec<Section> = (0..usize::from(count))
        .map(|index| {
            let at = table.start + index * SECTION_HEADER_LEN;
            Ok(Section {
                name: file.u32(at)?,
                kind: file.u32(at + 4)?,
                offset: file.u64(at + 24)?,
                size: file.u64(at + 32)?,
                link: file.u32(at + 40)?,
                entry_len: file.u64(at + 56)?,
            })
        })
        .collect::<Result<_, String>>()?;
    if sections[0].kind != SHT_NULL {
        return Err("section 0 is not the null section".into());
    }
    for (index, section) in sections.iter().enumerate().skip(1) {
        if section.kind != SHT_NOBITS && section.kind != SHT_NULL {
            file.range(section.offset, section.size, &format!("section {index}"))?;
        }
    }
    if names_index >= count {
        return Err(format!("e_shstrndx {names_index} is not a section (there are {count})"));
    }
    let names = string_table(file, &sections, u32::from(names_index), "the section name table")?;
    for (index, section) in sections.iter().enumerate().skip(1) {
        if u64::from(section.name) >= names.len() as u64 {
            return Err(format!("section {index}'s name lies outside the section name table"));
        }
        match section.kind {
            SHT_STRTAB => {
                string_table(file, &sections, index as u32, &format!("string table {index}"))?;
            }
            SHT_SYMTAB | SHT_DYNSYM => check_symbols(file, &sections, index)?,
            SHT_REL | SHT_RELA if section.link as usize >= sections.len() => {
                return Err(format!(
                    "relocation section {index} links to section {}, which does not exist",
                    section.link
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The bytes of string table `index`: a `SHT_STRTAB` inside the file whose last byte is NUL, so every name that
/// starts inside it also ends inside it.
fn string_table<'a>(file: &Reader<'a>, sections: &[Section], index: u32, what: &str) -> Result<&'a [u8], String> {
    let Some(section) = sections.get(index as usize) else {
        return Err(format!("{what} is section {index}, which does not exist"));
    };
    if section.kind != SHT_STRTAB {
        return Err(format!("{what} (section {index}) is not a string table"));
    }
    let bytes = &file.0[file.range(section.offset, section.size, what)?];
    if bytes.last() != Some(&0) {
        return Err(format!("{what} (section {index}) does not end with a NUL byte"));
    }
    Ok(bytes)
}

fn check_symbols(file: &Reader<'_>, sections: &[Section], index: usize) -> Result<(), String> {
    let symbols = sections[index];
    if symbols.entry_len != SYMBOL_LEN || symbols.size % SYMBOL_LEN != 0 {
        return Err(format!(
            "symbol table {index} has entries of {} bytes and {} bytes in all; ELF64 symbols are {SYMBOL_LEN} bytes",
            symbols.entry_len, symbols.size
        ));
    }
    let names = string_table(file, sections, symbols.link, &format!("symbol table {index}'s string table"))?;
    let range = file.range(symbols.offset, symbols.size, &format!("section {index}"))?;
    for (number, at) in range.step_by(SYMBOL_LEN as usize).enumerate() {
        if u64::from(file.u32(at)?) >= names.len() as u64 {
            return Err(format!("symbol {number} of section {index} has a name outside its string table"));
        }
        let section_index = file.u16(at + 6)?;
        if section_index < SHN_LORESERVE && usize::from(section_index) >= sections.len() {
            return Err(format!(
                "symbol {number} of section {index} is defined in section {section_index}, which does not exist"
            ));
        }
    }
    Ok(())
}

/// Little-endian reads that fail instead of panicking.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn bytes<const N: usize>(&self, at: usize) -> Result<[u8; N], String> {
        at.checked_add(N)
            .and_then(|end| self.0.get(at..end))
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| format!("truncated: a field at byte {at} lies past the end ({} bytes)", self.0.len()))
    }
    fn u16(&self, at: usize) -> Result<u16, String> {
        self.bytes(at).map(u16::from_le_bytes)
    }
    fn u32(&self, at: usize) -> Result<u32, String> {
        self.bytes(at).map(u32::from_le_bytes)
    }
    fn u64(&self, at: usize) -> Result<u64, String> {
        self.bytes(at).map(u64::from_le_bytes)
    }

    /// `offset..offset + size` as indices into the file, or why it is not inside it.
    fn range(&self, offset: u64, size: u64, what: &str) -> Result<Range<usize>, String> {
        let end = offset
            .checked_add(size)
            .ok_or_else(|| format!("{what} (offset {offset}, {size} bytes) overflows a 64-bit offset"))?;
        if end > self.0.len() as u64 {
            return Err(format!(
                "{what} (bytes {offset}..{end}) lies outside the file ({} bytes): truncated or corrupt",
                self.0.len()
            ));
        }
        // Both fit in usize: end <= len.
        Ok(offset as usize..end as usize)
    }
}

#[cfg(test)]
mod tests;
