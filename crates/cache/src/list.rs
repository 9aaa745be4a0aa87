//! Slab-allocated intrusive doubly linked lists with `u32` links.
//!
//! Why: the conventional policies spend their time moving entries between
//! list positions. Nodes live in one `Vec`, links are 4-byte indices, freed
//! nodes are reused, so an access touches two or three cache lines and never
//! allocates once the slab has grown to the cache's size. Up to `L` lists share
//! one slab (ARC's T1, T2, B1, B2), and a node records which list holds it.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use rustc_hash::FxHasher;

/// "No node".
pub(crate) const NIL: u32 = u32::MAX;

/// The fast key → node index map every policy uses.
pub(crate) type Index = HashMap<u64, u32, BuildHasherDefault<FxHasher>>;

/// A map with room for `n` entries.
pub(crate) fn index_with_capacity(n: u64) -> Index {
    Index::with_capacity_and_hasher(n.min(1 << 26) as usize, Default::default())
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
