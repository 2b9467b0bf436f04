# THROWAWAY experiment: entries' open chunk in a table keyed by entry (writes only; readers do not see it)
import re
p='storage/src/db.rs'; s=open(p).read()
s=s.replace("    pub chunks: Table,\n","    pub chunks: Table,\n    pub open_exp: Table,\n",1)
s=s.replace('''        let chunks = env.create_database(&mut wtxn, Some("chunks"))?;''','''        let chunks = env.create_database(&mut wtxn, Some("chunks"))?;
        let open_exp = env.create_database(&mut wtxn, Some("open_exp"))?;''',1)
s=s.replace("            chunks,\n","            chunks,\n            open_exp,\n",1)
open(p,'w').write(s)
p='storage/src/index.rs'; s=open(p).read()
s=s.replace("    chunks: Table,\n","    chunks: Table,\n    open_exp: Table,\n",1)
s=s.replace("            chunks: db.chunks,\n","            chunks: db.chunks,\n            open_exp: db.open_exp,\n",1)
s=s.replace("            let last = self.floor_chunk(txn, entry_id, u64::MAX)?;","            let last = self.last_chunk_exp(txn, entry_id)?;",1)
s=s.replace('''    /// The entry's chunk with the greatest key `<= ts`.
    fn floor_chunk''','''    fn last_chunk_exp<'t>(&self, txn: &'t Txn<'_>, entry_id: u32) -> Result<Option<(u64, &'t [u8])>> {
        if let Some(v) = self.open_exp.get(txn, &entry_id.to_be_bytes())? {
            let mut k = [0u8; 8];
            k.copy_from_slice(&v[..8]);
            return Ok(Some((u64::from_be_bytes(k), &v[8..])));
        }
        self.floor_chunk(txn, entry_id, u64::MAX)
    }

    /// The entry's chunk with the greatest key `<= ts`.
    fn floor_chunk''',1)
old='''        let mut last = None;
        for (k, v) in chunks {
            self.chunks.put(txn, &chunk_key(entry_id, k), &v)?;
            last = Some((k, v));
        }'''
assert old in s
s=s.replace(old,'''        let mut last = None;
        let all: Vec<(u64, Vec<u8>)> = chunks.into_iter().collect();
        let n = all.len();
        for (i, (k, v)) in all.into_iter().enumerate() {
            if i + 1 == n {
                let mut buf = Vec::with_capacity(8 + v.len());
                buf.extend_from_slice(&k.to_be_bytes());
                buf.extend_from_slice(&v);
                self.open_exp.put(txn, &entry_id.to_be_bytes(), &buf)?;
            } else {
                self.chunks.put(txn, &chunk_key(entry_id, k), &v)?;
            }
            last = Some((k, v));
        }''',1)
open(p,'w').write(s)
