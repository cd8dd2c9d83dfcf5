/* One request header of a Go http.Header (map[string][]string), read where a net/http
 * handler starts: its W3C `traceparent`, so the handler's span joins the caller's trace.
 * Read here, while the request is live, not later from userspace, where the map may have
 * changed or been freed. Included by captures.h.
 *
 * The map is searched slot by slot (its hash seed is per map, so the key's bucket is not
 * computed): small maps only, a request's few headers. A bigger one is not searched
 * (GP_VAL_TRUNCATED), never guessed. Layouts (amd64), from the Go sources:
 * - GP_MAP_HMAP (Go <= 1.23, and 1.24/1.25 with GOEXPERIMENT=noswissmap): hmap {count,
 *   flags u8, B u8, noverflow u16, hash0 u32, buckets, oldbuckets, ...}; a bucket of
 *   map[string][]string is tophash[8], keys[8], elems[8], overflow pointer (336 bytes). A
 *   slot is full when its tophash is >= 5 (0, 1: empty; 2-4: moved to the new buckets).
 *   While the map grows, the old buckets not yet moved are searched too.
 * - GP_MAP_SWISS (Go >= 1.24): Map {used, seed, dirPtr, dirLen, ...}. dirLen 0: dirPtr is
 *   one group; else dirPtr is [dirLen]*table, a table {u16 used, capacity, growthLeft, u8
 *   localDepth, int index, groups.data, groups.lengthMask}. A group is a control word (a
 *   byte per slot: full when the top bit is clear) and 8 slots of (key, elem): 328 bytes.
 * - GP_MAP_SWISS_SPLIT (GOEXPERIMENT=mapsplitgroup): a group's 8 keys, then its 8 elems. */

#define GP_MAP_MAX_GROUPS 16 /* buckets or groups searched, overflow buckets included */
#define HMAP_BUCKET 336
#define SWISS_GROUP 328

/* "Traceparent", as net/http's server canonicalizes it: 8 + 3 bytes, little-endian. */
#define TP_KEY_LO 0x7261706563617254ULL /* "Tracepar" */
#define TP_KEY_HI 0x746e65ULL           /* "ent" */

/* The slots of one bucket or group at `g`: 1 when the key is there (s->hdr: the string
 * header of its first value, 0 when it has none), 0 when not, -1 when unreadable. The
 * bucket or group is read whole, with one helper call (each costs far more than the bytes
 * it copies), and searched in the scratch buffer; only keys of the right length are read.
 * Where the whole read fails, its slots in use are read one by one. */
__attribute__((noinline)) int gp_scan_group(struct scratch *s, __u64 g, __u32 layout)
{
	if (!s)
		return 0;
	__u32 size = layout == GP_MAP_HMAP ? HMAP_BUCKET : SWISS_GROUP;
	/* Go leaves the memory of empty slots as the kernel gave it: a page of them may not
	 * be present, and the whole read then fails. The slots in use are read one by one. */
	int bulk = !bpf_probe_read_user(s->grp, size, (void *)g);
	if (!bulk && bpf_probe_read_user(s->grp, 8, (void *)g))
		return -1;
	__u64 ctrl = *(__u64 *)s->grp;
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < 8; i++) {
		__u8 c = ctrl >> (8 * i);
		__u32 key, elem; /* offsets in the bucket or group */
		if (layout == GP_MAP_HMAP) {
			if (c < 5)
				continue;
		} else if (c & 0x80) {
			continue;
		}
		if (layout == GP_MAP_SWISS) {
			key = 8 + 40 * i;
			elem = key + 16;
		} else {
			key = 8 + 16 * i;
			elem = 8 + 128 + 24 * i;
		}
		__u64 kh[2], sl[2];
		if (bulk) {
			kh[0] = *(__u64 *)(s->grp + (key & 0x1ff));
			kh[1] = *(__u64 *)(s->grp + ((key + 8) & 0x1ff));
		} else if (bpf_probe_read_user(kh, 16, (void *)(g + key))) {
			continue;
		}
		__u64 kptr = kh[0], klen = kh[1];
		if (klen != 11)
			continue;
		__u64 kb[2] = { 0, 0 };
		if (bpf_probe_read_user(kb, 11, (void *)kptr))
			continue;
		if (kb[0] != TP_KEY_LO || (kb[1] & 0xffffff) != TP_KEY_HI)
			continue;
		if (bulk) {
			sl[0] = *(__u64 *)(s->grp + (elem & 0x1ff));
			sl[1] = *(__u64 *)(s->grp + ((elem + 8) & 0x1ff));
		} else if (bpf_probe_read_user(sl, 16, (void *)(g + elem))) {
			return -1;
		}
		__u64 sptr = sl[0], slen = sl[1];
		s->hdr[0] = 0;
		s->hdr[1] = 0;
		if (slen && bpf_probe_read_user(s->hdr, 16, (void *)sptr))
			return -1;
		return 1;
	}
	return 0;
}

/* The header in the map at `m`: 1 found (s->hdr), 0 not there, -1 unreadable, -2 the map
 * is bigger than searched. One flat loop of at most GP_MAP_MAX_GROUPS searches, each a
 * call verified once: nested loops multiply the verifier's work past its limit. */
__attribute__((noinline)) int gp_header_lookup(struct scratch *s, __u64 m, __u32 layout)
{
	if (!s)
		return 0;
	if (!m)
		return 0; /* a nil map: no headers */
	__u64 h[4];
	if (bpf_probe_read_user(h, sizeof(h), (void *)m))
		return -1;
	if (!h[0])
		return 0; /* empty */
	if (layout == GP_MAP_HMAP) {
		__u32 flags = h[1] & 0xff, B = (h[1] >> 8) & 0xff;
		if (B > 4)
			return -2;
		/* The buckets, then the old ones not yet moved (half as many, or as many when
		 * growing in place: sameSizeGrow), each followed by its overflow chain. */
		__u64 nb = 1ULL << B, old = h[3];
		__u64 n = nb + (old ? ((flags & 8) ? nb : nb >> 1) : 0);
		__u64 j = 0, b = 0;
#pragma clang loop unroll(disable)
		for (__u32 k = 0; k < GP_MAP_MAX_GROUPS; k++) {
			if (!b) {
				if (j >= n)
					return 0;
				b = j < nb ? h[2] + j * HMAP_BUCKET : old + (j - nb) * HMAP_BUCKET;
				j++;
			}
			int r = gp_scan_group(s, b, layout);
			if (r)
				return r;
			if (bpf_probe_read_user(&b, 8, (void *)(b + HMAP_BUCKET - 8)))
				return -1;
		}
		return (b || j < n) ? -2 : 0;
	}
	__u64 dir = h[2], dir_len = h[3];
	if (dir_len == 0)
		return gp_scan_group(s, dir, layout);
	/* Each directory entry's table, group by group. A table the directory names twice is
	 * searched twice: no harm. */
	__u64 d = 0, g = 0, groups = 0, ngroups = 0;
#pragma clang loop unroll(disable)
	for (__u32 k = 0; k < GP_MAP_MAX_GROUPS; k++) {
		if (g >= ngroups) {
			if (d >= dir_len)
				return 0;
			__u64 table, t[2];
			if (bpf_probe_read_user(&table, 8, (void *)(dir + 8 * d)) || !table)
				return -1;
			if (bpf_probe_read_user(t, 16, (void *)(table + 16)))
				return -1;
			groups = t[0];
			ngroups = t[1] + 1;
			g = 0;
			d++;
		}
		int r = gp_scan_group(s, groups + g * SWISS_GROUP, layout);
		if (r)
			return r;
		g++;
	}
	return (g < ngroups || d < dir_len) ? -2 : 0;
}
