//! Slab-allocated intrusive doubly linked lists with `u32` links, and the
//! hash index that finds their nodes.
//!
//! Why: the conventional policies spend their time moving entries between
//! list positions. Nodes live in one `Vec`, links are 4-byte indices, freed
//! nodes are reused, so an access touches two or three cache lines and never
//! allocates once the slab has grown to the cache's size. Up to `L` lists share
//! one slab (ARC's T1, T2, B1, B2), and a node records which list holds it.

/// "No node".
pub(crate) const NIL: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
#[repr(C)]
struct Slot {
    key: u64,
    /// `NIL` when the slot is empty.
    val: u32,
}

const EMPTY: Slot = Slot { key: 0, val: NIL };

/// The key → node index map of the policies: open addressing with linear
/// probing and backward-shift deletion, at most half full, Fibonacci
/// hashing. Written here rather than taken from `std` so that
/// [`Index::prefetch`] can bring a key's slot into the CPU cache before it is
/// needed: the simulator looks a few requests ahead, and a lookup then costs a
/// cache hit instead of a trip to memory.
#[derive(Debug, Clone)]
pub(crate) struct Index {
    slots: Vec<Slot>,
    shift: u32,
    len: usize,
}

const FIB: u64 = 0x9E37_79B9_7F4A_7C15;

impl Index {
    fn with_slots(n: usize) -> Index {
        let n = n.next_power_of_two().max(8);
        Index {
            slots: vec![EMPTY; n],
            shift: 64 - n.trailing_zeros(),
            len: 0,
        }
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(FIB) >> self.shift) as usize
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// Asks the CPU to fetch the slot where `key` would be.
    #[inline]
    pub fn prefetch(&self, key: u64) {
        let p = self.slots.as_ptr().wrapping_add(self.home(key));
        prefetch(p.cast());
    }

    #[inline]
    pub fn get(&self, key: &u64) -> Option<&u32> {
        let mut i = self.home(*key);
        loop {
            let s = &self.slots[i];
            if s.val == NIL {
                return None;
            }
            if s.key == *key {
                return Some(&s.val);
            }
            i = (i + 1) & self.mask();
        }
    }

    #[inline]
    pub fn contains_key(&self, key: &u64) -> bool {
        self.get(key).is_some()
    }

    /// Inserts or overwrites.
    #[inline]
    pub fn insert(&mut self, key: u64, val: u32) {
        debug_assert_ne!(val, NIL);
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mut i = self.home(key);
        loop {
            let s = &mut self.slots[i];
            if s.val == NIL {
                *s = Slot { key, val };
                self.len += 1;
                return;
            }
            if s.key == key {
                s.val = val;
                return;
            }
            i = (i + 1) & self.mask();
        }
    }

    fn grow(&mut self) {
        let old = std::mem::replace(self, Index::with_slots(self.slots.len() * 2));
        for s in old.slots {
            if s.val != NIL {
                self.insert(s.key, s.val);
            }
        }
    }

    /// Removes `key`, shifting later entries of its run back so that no
    /// tombstones are needed.
    #[inline]
    pub fn remove(&mut self, key: &u64) -> Option<u32> {
        let mask = self.mask();
        let mut i = self.home(*key);
        loop {
            let s = self.slots[i];
            if s.val == NIL {
                return None;
            }
            if s.key == *key {
                break;
            }
            i = (i + 1) & mask;
        }
        let out = self.slots[i].val;
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let s = self.slots[j];
            if s.val == NIL {
                break;
            }
            let h = self.home(s.key);
            // Move s back into the hole at i unless its home lies in (i, j].
            let in_between = if i <= j {
                i < h && h <= j
            } else {
                i < h || h <= j
            };
            if !in_between {
                self.slots[i] = s;
                i = j;
            }
        }
        self.slots[i] = EMPTY;
        self.len -= 1;
        Some(out)
    }

    pub fn clear(&mut self) {
        self.slots.fill(EMPTY);
        self.len = 0;
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }
}

/// A hint to bring the cache line at `p` closer; never faults.
#[inline(always)]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch is a hint that never dereferences `p` architecturally.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// A map with room for `n` entries.
pub(crate) fn index_with_capacity(n: u64) -> Index {
    Index::with_slots((2 * n.min(1 << 26)) as usize)
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Node {
    pub key: u64,
    prev: u32,
    next: u32,
    pub tenant: u32,
    pub list: u8,
    /// Policy-defined flag (CAR's reference bit).
    pub flag: bool,
}

/// `L` lists over one slab. Front is the most recently inserted end.
#[derive(Debug, Clone)]
pub(crate) struct Lists<const L: usize> {
    nodes: Vec<Node>,
    free: u32,
    head: [u32; L],
    tail: [u32; L],
    len: [u64; L],
}

impl<const L: usize> Lists<L> {
    pub fn with_capacity(n: u64) -> Self {
        Lists {
            nodes: Vec::with_capacity(n.min(1 << 26) as usize),
            free: NIL,
            head: [NIL; L],
            tail: [NIL; L],
            len: [0; L],
        }
    }

    #[inline]
    pub fn len(&self, l: usize) -> u64 {
        self.len[l]
    }

    #[inline]
    pub fn node(&self, i: u32) -> &Node {
        &self.nodes[i as usize]
    }

    #[inline]
    pub fn node_mut(&mut self, i: u32) -> &mut Node {
        &mut self.nodes[i as usize]
    }

    /// Asks the CPU to fetch node `i`.
    #[inline]
    pub fn prefetch(&self, i: u32) {
        prefetch(self.nodes.as_ptr().wrapping_add(i as usize).cast());
    }

    /// The staged look-ahead of [`crate::CachePolicy::prefetch`] for a policy
    /// whose entries are nodes of these lists found through `map`: depth 0
    /// fetches the index slot of `key`, 1 the entry's node, 2 its neighbours.
    #[inline]
    pub fn prefetch_key(&self, map: &Index, key: u64, depth: u8) {
        if depth == 0 {
            map.prefetch(key);
        } else if let Some(&i) = map.get(&key) {
            if depth == 1 {
                self.prefetch(i);
            } else {
                self.prefetch_neighbours(i);
            }
        }
    }

    /// Asks the CPU to fetch the neighbours of node `i` (which should be in
    /// the cache already).
    #[inline]
    pub fn prefetch_neighbours(&self, i: u32) {
        let n = &self.nodes[i as usize];
        if n.prev != NIL {
            self.prefetch(n.prev);
        }
        if n.next != NIL {
            self.prefetch(n.next);
        }
    }

    /// The front (most recent) node of list `l`.
    #[inline]
    pub fn front(&self, l: usize) -> u32 {
        self.head[l]
    }

    /// The back (oldest) node of list `l`.
    #[inline]
    pub fn back(&self, l: usize) -> u32 {
        self.tail[l]
    }

    /// The node after `i` towards the back.
    #[cfg(test)]
    pub fn next(&self, i: u32) -> u32 {
        self.nodes[i as usize].next
    }

    /// A new node, not in any list yet.
    #[inline]
    pub fn alloc(&mut self, key: u64, tenant: u32) -> u32 {
        let n = Node {
            key,
            prev: NIL,
            next: NIL,
            tenant,
            list: u8::MAX,
            flag: false,
        };
        if self.free != NIL {
            let i = self.free;
            self.free = self.nodes[i as usize].next;
            self.nodes[i as usize] = n;
            i
        } else {
            let i = self.nodes.len() as u32;
            assert!(i != NIL, "slab full");
            self.nodes.push(n);
            i
        }
    }

    /// Returns an unlinked node to the free list.
    #[inline]
    pub fn release(&mut self, i: u32) {
        debug_assert_eq!(self.nodes[i as usize].list, u8::MAX);
        self.nodes[i as usize].next = self.free;
        self.free = i;
    }

    #[inline]
    pub fn push_front(&mut self, l: usize, i: u32) {
        let h = self.head[l];
        {
            let n = &mut self.nodes[i as usize];
            n.prev = NIL;
            n.next = h;
            n.list = l as u8;
        }
        if h != NIL {
            self.nodes[h as usize].prev = i;
        } else {
            self.tail[l] = i;
        }
        self.head[l] = i;
        self.len[l] += 1;
    }

    #[inline]
    pub fn push_back(&mut self, l: usize, i: u32) {
        let t = self.tail[l];
        {
            let n = &mut self.nodes[i as usize];
            n.next = NIL;
            n.prev = t;
            n.list = l as u8;
        }
        if t != NIL {
            self.nodes[t as usize].next = i;
        } else {
            self.head[l] = i;
        }
        self.tail[l] = i;
        self.len[l] += 1;
    }

    /// Takes node `i` out of whatever list holds it.
    #[inline]
    pub fn unlink(&mut self, i: u32) {
        let Node {
            prev, next, list, ..
        } = self.nodes[i as usize];
        let l = list as usize;
        debug_assert!(l < L);
        if prev != NIL {
            self.nodes[prev as usize].next = next;
        } else {
            self.head[l] = next;
        }
        if next != NIL {
            self.nodes[next as usize].prev = prev;
        } else {
            self.tail[l] = prev;
        }
        self.len[l] -= 1;
        self.nodes[i as usize].list = u8::MAX;
    }

    /// Moves node `i` (already in list `l`) to the front of `l`.
    #[inline]
    pub fn move_to_front(&mut self, l: usize, i: u32) {
        if self.head[l] == i {
            return;
        }
        self.unlink(i);
        self.push_front(l, i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(s: &Lists<2>, l: usize) -> Vec<u64> {
        let mut out = vec![];
        let mut i = s.front(l);
        while i != NIL {
            out.push(s.node(i).key);
            i = s.next(i);
        }
        out
    }

    #[test]
    fn index_matches_a_hashmap_under_churn() {
        use std::collections::HashMap;
        let mut ix = index_with_capacity(4);
        let mut m: HashMap<u64, u32> = HashMap::new();
        let mut r = rng::SplitMix64::new(1);
        for step in 0..200_000u32 {
            let x = r.next_u64();
            // Few distinct keys, many collisions in the top bits.
            let k = (x % 3000) << 40 | (x % 7);
            match x % 3 {
                0 => {
                    ix.insert(k, step);
                    m.insert(k, step);
                }
                1 => assert_eq!(ix.remove(&k), m.remove(&k)),
                _ => assert_eq!(ix.get(&k).copied(), m.get(&k).copied()),
            }
            assert_eq!(ix.len(), m.len());
        }
        for (k, v) in &m {
            assert_eq!(ix.get(k), Some(v));
            ix.prefetch(*k);
        }
        ix.clear();
        assert_eq!(ix.len(), 0);
        assert!(!ix.contains_key(m.keys().next().unwrap()));
    }

    #[test]
    fn lists_link_unlink_and_reuse_nodes() {
        let mut s = Lists::<2>::with_capacity(4);
        let a = s.alloc(1, 0);
        let b = s.alloc(2, 0);
        let c = s.alloc(3, 0);
        s.push_front(0, a);
        s.push_front(0, b);
        s.push_back(0, c);
        assert_eq!(keys(&s, 0), vec![2, 1, 3]);
        s.move_to_front(0, c);
        assert_eq!(keys(&s, 0), vec![3, 2, 1]);
        s.unlink(b);
        s.push_back(1, b);
        assert_eq!(keys(&s, 0), vec![3, 1]);
        assert_eq!(keys(&s, 1), vec![2]);
        assert_eq!((s.len(0), s.len(1)), (2, 1));
        assert_eq!(s.back(0), a);
        s.unlink(a);
        s.release(a);
        let d = s.alloc(4, 9);
        assert_eq!(d, a, "freed node reused");
        assert_eq!(s.node(d).tenant, 9);
        s.unlink(c);
        assert_eq!(keys(&s, 0), Vec::<u64>::new());
        assert_eq!((s.front(0), s.back(0)), (NIL, NIL));
    }
}
