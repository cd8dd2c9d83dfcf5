/* One request header of a Go http.Header (map[string][]string), read where a net/http
 * handler starts: its W3C `traceparent`, so the handler's span joins the caller's trace.
 * Read here, while the request is live, not later from userspace, where the map may have
 * changed or been freed.
 *
 * The map is searched slot by slot: its hash seed is per map and its hash (AES-based on
 * amd64) is not computed here, so the key's bucket is not known. Every bucket or group is
 * searched, up to GP_MAP_MAX_KEYS keys in GP_MAP_MAX_READS buckets or groups: net/http
 * sizes a request's map for at most 1,000 headers (textproto's hint), and a map of that
 * many is searched whole in any state of its growth. A bigger one is not searched
 * (GP_VAL_TRUNCATED), never guessed; the probe counts it (gp_stats.incomplete).
 * Layouts (amd64), from the Go sources:
 * - GP_MAP_HMAP (Go <= 1.23, and 1.24/1.25 with GOEXPERIMENT=noswissmap): hmap {count,
 *   flags u8, B u8, noverflow u16, hash0 u32, buckets, oldbuckets, nevacuate, ...}; a
 *   bucket of map[string][]string is tophash[8], keys[8], elems[8], overflow pointer (336
 *   bytes). A slot is full when its tophash is >= 5 (0: empty, and so is every slot after
 *   it in the bucket and its overflow chain; 1: empty; 2-4: moved to the new buckets).
 *   While the map grows, the old buckets not yet moved (from nevacuate on) are searched
 *   too.
 * - GP_MAP_SWISS (Go >= 1.24): Map {used, seed, dirPtr, dirLen, ...}. dirLen 0: dirPtr is
 *   one group; else dirPtr is [dirLen]*table (a table spans 2^(globalDepth - localDepth)
 *   adjacent entries), a table {u16 used, capacity, growthLeft, u8 localDepth, int index,
 *   groups.data, groups.lengthMask}. A group is a control word (a byte per slot: full when
 *   the top bit is clear) and 8 slots of (key, elem): 328 bytes.
 * - GP_MAP_SWISS_SPLIT (GOEXPERIMENT=mapsplitgroup): a group's 8 keys, then its 8 elems.
 *
 * The buckets or groups are visited by bpf_loop, whose callback the verifier checks a few
 * times whatever the number of visits (a loop of 512 calls written out would be checked
 * 512 times): its state lives in the per-CPU scratch map (s->walk), whose contents the
 * verifier does not track, so one visit's counters look like the next one's. Each visit
 * reads one bucket or group with gp_scan_group. The search stops at the key, or once it
 * has seen as many keys as the map holds (its count). */
#ifndef GPROBE_GOMAP_H
#define GPROBE_GOMAP_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "gprobe.h"
#include "maps.h"

#define GP_MAP_MAX_READS 512 /* buckets or groups read in one search, overflow buckets included */
#define GP_MAP_MAX_KEYS 1024 /* a map with more keys is not searched */
#define HMAP_BUCKET 336
#define SWISS_GROUP 328

/* "Traceparent", as net/http's server canonicalizes it: 8 + 3 bytes, little-endian. */
#define TP_KEY_LO 0x7261706563617254ULL /* "Tracepar" */
#define TP_KEY_HI 0x746e65ULL           /* "ent" */

/* What gp_scan_group saw in one bucket or group: its keys (the low byte: full slots), and */
#define GP_SCAN_FOUND 0x100      /* the key, its value's string header in s->hdr */
#define GP_SCAN_UNREADABLE 0x200 /* a slot in use, or the bucket itself, could not be read */
#define GP_SCAN_LAST 0x400       /* hmap: nothing in this bucket's overflow chain after it */

/* The slots of one bucket or group at `g`, and (hmap) its overflow bucket in s->ovf (0: none
 * or not to be followed). The bucket or group is read whole, with one helper call (each
 * costs far more than the bytes it copies), and searched in the scratch buffer; only keys
 * of the right length are read. Where the whole read fails, its slots in use are read one
 * by one. */
GP_SUBPROG int gp_scan_group(GP_S_PARAMS, __u64 g, __u32 layout)
{
	GP_S_LOAD
	s->ovf = 0;
	__u32 size = layout == GP_MAP_HMAP ? HMAP_BUCKET : SWISS_GROUP;
	/* Go leaves the memory of empty slots as the kernel gave it: a page of them may not
	 * be present, and the whole read then fails. The slots in use are read one by one. */
	int bulk = !bpf_probe_read_user(s->grp, size, (void *)g);
	if (!bulk && bpf_probe_read_user(s->grp, 8, (void *)g))
		return GP_SCAN_UNREADABLE;
	int out = 0;
	__u64 ctrl = *(__u64 *)s->grp;
	if (layout == GP_MAP_HMAP) {
		__u8 first = ctrl;
		if (first >= 2 && first <= 4)
			return GP_SCAN_LAST; /* an old bucket moved whole, its chain with it */
		if (bulk)
			s->ovf = *(__u64 *)(s->grp + HMAP_BUCKET - 8);
		else if (bpf_probe_read_user(&s->ovf, 8, (void *)(g + HMAP_BUCKET - 8)))
			out |= GP_SCAN_UNREADABLE;
	}
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < 8; i++) {
		__u8 c = ctrl >> (8 * i);
		__u32 key, elem; /* offsets in the bucket or group */
		if (layout == GP_MAP_HMAP) {
			if (c == 0) {
				/* emptyRest: Go's own lookup stops here too. */
				s->ovf = 0;
				return out | GP_SCAN_LAST;
			}
			if (c < 5)
				continue;
		} else if (c & 0x80) {
			continue;
		}
		out++;
		if (layout == GP_MAP_SWISS) {
			key = 8 + 40 * i;
			elem = key + 16;
		} else {
			key = 8 + 16 * i;
			elem = 8 + 128 + 24 * i;
		}
		/* In the scratch map, not on the stack: see struct scratch's scan. */
		__u64 *kh = s->scan, *sl = s->scan + 2, *kb = s->scan + 4;
		if (bulk) {
			kh[0] = *(__u64 *)(s->grp + (key & 0x1ff));
			kh[1] = *(__u64 *)(s->grp + ((key + 8) & 0x1ff));
		} else if (bpf_probe_read_user(kh, 16, (void *)(g + key))) {
			out |= GP_SCAN_UNREADABLE;
			continue;
		}
		__u64 kptr = kh[0], klen = kh[1];
		if (klen != 11)
			continue;
		kb[0] = 0;
		kb[1] = 0;
		if (bpf_probe_read_user(kb, 11, (void *)kptr)) {
			out |= GP_SCAN_UNREADABLE;
			continue;
		}
		if (kb[0] != TP_KEY_LO || (kb[1] & 0xffffff) != TP_KEY_HI)
			continue;
		if (bulk) {
			sl[0] = *(__u64 *)(s->grp + (elem & 0x1ff));
			sl[1] = *(__u64 *)(s->grp + ((elem + 8) & 0x1ff));
		} else if (bpf_probe_read_user(sl, 16, (void *)(g + elem))) {
			return out | GP_SCAN_UNREADABLE;
		}
		__u64 sptr = sl[0], slen = sl[1];
		s->hdr[0] = 0;
		s->hdr[1] = 0;
		if (slen && bpf_probe_read_user(s->hdr, 16, (void *)sptr))
			return out | GP_SCAN_UNREADABLE;
		return out | GP_SCAN_FOUND;
	}
	return out;
}

/* A search in progress (s->walk). */
struct gp_walk {
	__u64 next;     /* hmap: the overflow bucket to search next (0: the next of the arrays) */
	__u64 buckets;  /* hmap: the bucket array; swiss: the directory */
	__u64 old;      /* hmap: the first old bucket not yet moved */
	__u64 nb;       /* hmap: buckets in the array */
	__u64 n;        /* hmap: buckets and old buckets to search; swiss: directory entries */
	__u64 j;        /* how many of those were taken */
	__u64 table;    /* swiss: the table being searched, */
	__u64 groups;   /* its groups, */
	__u64 g;        /* the next of them, */
	__u64 ngroups;  /* and how many it has */
	__u64 left;     /* keys of the map not seen yet */
	__u32 layout;
	__u32 unreadable; /* something in use could not be read */
	__u32 found;
	__u32 done;       /* searched to the end (or every key seen) */
};
_Static_assert(sizeof(struct gp_walk) <= sizeof(((struct scratch *)0)->walk),
	       "struct scratch's walk holds a struct gp_walk");

#ifndef GP_NO_BPF_LOOP
/* One bucket or group: the next one of `w`. 1 stops the loop. */
static long gp_walk_step(__u64 i, void *ctx)
{
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return 1;
	struct gp_walk *w = (struct gp_walk *)s->walk;
	__u64 at;
	if (w->layout == GP_MAP_HMAP) {
		if (!w->next) {
			if (w->j >= w->n) {
				w->done = 1;
				return 1;
			}
			w->next = w->j < w->nb ? w->buckets + w->j * HMAP_BUCKET
					       : w->old + (w->j - w->nb) * HMAP_BUCKET;
			w->j++;
		}
		at = w->next;
	} else {
		if (w->g >= w->ngroups) {
			/* The next table of the directory; its duplicates follow it. */
			if (w->j >= w->n) {
				w->done = 1;
				return 1;
			}
			__u64 table = 0, t[2];
			if (bpf_probe_read_user(&table, 8, (void *)(w->buckets + 8 * w->j)) || !table) {
				w->unreadable = 1;
				w->j++;
				return 0;
			}
			w->j++;
			if (table == w->table)
				return 0;
			w->table = table;
			if (bpf_probe_read_user(t, 16, (void *)(table + 16))) {
				w->unreadable = 1;
				return 0;
			}
			w->groups = t[0];
			w->ngroups = t[1] + 1;
			w->g = 0;
		}
		at = w->groups + w->g * SWISS_GROUP;
		w->g++;
	}
	int r = gp_scan_group(GP_S(s), at, w->layout);
	if (w->layout == GP_MAP_HMAP)
		w->next = s->ovf;
	if (r & GP_SCAN_FOUND) {
		w->found = 1;
		return 1;
	}
	if (r & GP_SCAN_UNREADABLE)
		w->unreadable = 1;
	__u64 keys = r & 0xff;
	w->left = keys >= w->left ? 0 : w->left - keys;
	if (!w->left) {
		w->done = 1; /* every key of the map seen */
		return 1;
	}
	return 0;
}
#endif

/* The header in the map at `m`: 1 found (s->hdr), 0 not there, -1 something in use could
 * not be read, -2 the map is bigger than searched. -1 and -2: not searched to the end.
 * Built with GP_NO_BPF_LOOP (the object for kernels without bpf_loop, before 5.17), a map
 * with keys is never searched: -2. */
GP_SUBPROG int gp_header_lookup(GP_S_PARAMS, __u64 m, __u32 layout)
{
	GP_S_LOAD
	if (!m)
		return 0; /* a nil map: no headers */
	__u64 h[5];
	if (bpf_probe_read_user(h, sizeof(h), (void *)m))
		return -1;
	if (!h[0])
		return 0; /* empty */
	if (h[0] > GP_MAP_MAX_KEYS)
		return -2;
	struct gp_walk *w = (struct gp_walk *)s->walk;
	__builtin_memset(w, 0, sizeof(*w));
	w->layout = layout;
	w->left = h[0];
	if (layout == GP_MAP_HMAP) {
		__u32 flags = h[1] & 0xff, B = (h[1] >> 8) & 0xff;
		if (B > 16)
			return -2;
		/* The buckets, then the old ones not yet moved (of half as many, or as many when
		 * growing in place: sameSizeGrow), each followed by its overflow chain. */
		__u64 nb = 1ULL << B, old = h[3], nold = 0, nevac = h[4];
		if (old) {
			nold = (flags & 8) ? nb : nb >> 1;
			nevac = nevac < nold ? nevac : nold;
			old += nevac * HMAP_BUCKET;
			nold -= nevac;
		}
		w->buckets = h[2];
		w->old = old;
		w->nb = nb;
		w->n = nb + nold;
		if (w->n > GP_MAP_MAX_READS)
			return -2;
	} else if (h[3] == 0) {
		/* A small map: dirPtr is its one group. */
		w->groups = h[2];
		w->ngroups = 1;
	} else {
		w->buckets = h[2];
		w->n = h[3];
		if (w->n > GP_MAP_MAX_READS)
			return -2;
	}
#ifdef GP_NO_BPF_LOOP
	/* Set up as if to search (every argument used: the verifier checks a global
	 * function's arguments, and the compiler does not pass one it sees unused). */
	return -2;
#else
	bpf_loop(GP_MAP_MAX_READS, gp_walk_step, NULL, 0);
	if (w->found)
		return 1;
	if (w->unreadable)
		return -1;
	return w->done ? 0 : -2;
#endif
}

#endif
