/* A umad client for the tests of tests/c_abi.rs: each mode exercises one contract of
 * libibumad through the C API only, and prints what it saw as key=value lines. Built with
 * gcc against Debian's <infiniband/umad.h> and linked to the library under test. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <endian.h>
#include <infiniband/umad.h>
#include <infiniband/umad_str.h>

#define MAD 256
#define PERF 0x04

static long now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* A PerfMgt PortCounters Get with TID `tid`. */
static void perf_get(void *umad, uint64_t tid)
{
	uint8_t *m = umad_get_mad(umad);
	memset(m, 0, MAD);
	m[0] = 1; m[1] = PERF; m[2] = 1; m[3] = 0x01;
	uint64_t t = htobe64(tid);
	memcpy(m + 8, &t, 8);
	m[16] = 0x00; m[17] = 0x12; /* PortCounters */
	m[65] = 1;                  /* PortSelect */
}

static uint64_t tid_of(void *umad)
{
	uint64_t t;
	memcpy(&t, (uint8_t *)umad_get_mad(umad) + 8, 8);
	return be64toh(t);
}

static int open_port(void)
{
	int fd = umad_open_port(NULL, 0);
	printf("open=%d\n", fd < 0 ? fd : 0);
	if (fd < 0)
		exit(2);
	return fd;
}

static int my_lid(void)
{
	umad_port_t p;
	if (umad_get_port(NULL, 0, &p) < 0)
		exit(3);
	int lid = p.base_lid;
	umad_release_port(&p);
	return lid;
}

static void *alloc_umad(void)
{
	return calloc(1, umad_size() + MAD);
}

static int recv_one(int fd, void *umad, int len, int timeout, int *out_len)
{
	int l = len;
	int r = umad_recv(fd, umad, &l, timeout);
	*out_len = l;
	return r;
}

static int mode_enum(void)
{
	char names[4][UMAD_CA_NAME_LEN];
	int n = umad_get_cas_names(names, 4);
	printf("cas=%d\n", n);
	for (int i = 0; i < n; i++)
		printf("ca%d=%s\n", i, names[i]);
	umad_ca_t ca;
	int r = umad_get_ca(NULL, &ca);
	printf("get_ca=%d\n", r);
	if (r < 0)
		return 1;
	printf("ca_name=%s\nnode_type=%u\nnumports=%d\nfw_ver=%s\nca_type=%s\nhw_ver=%s\n",
	       ca.ca_name, ca.node_type, ca.numports, ca.fw_ver, ca.ca_type, ca.hw_ver);
	printf("node_guid=%016" PRIx64 "\nsystem_guid=%016" PRIx64 "\n", be64toh(ca.node_guid),
	       be64toh(ca.system_guid));
	for (int i = 0; i <= ca.numports; i++) {
		umad_port_t *p = ca.ports[i];
		if (!p) {
			printf("port%d=none\n", i);
			continue;
		}
		printf("port%d.portnum=%d\nport%d.lid=%u\nport%d.lmc=%u\nport%d.sm_lid=%u\n", i,
		       p->portnum, i, p->base_lid, i, p->lmc, i, p->sm_lid);
		printf("port%d.state=%u\nport%d.phys_state=%u\nport%d.rate=%u\n", i, p->state, i,
		       p->phys_state, i, p->rate);
		printf("port%d.capmask=%08x\nport%d.gid_prefix=%016" PRIx64
		       "\nport%d.port_guid=%016" PRIx64 "\n",
		       i, ntohl(p->capmask), i, be64toh(p->gid_prefix), i, be64toh(p->port_guid));
		printf("port%d.pkeys_size=%u\nport%d.pkey0=%04x\nport%d.link_layer=%s\n", i,
		       p->pkeys_size, i, p->pkeys_size ? p->pkeys[0] : 0, i, p->link_layer);
	}
	printf("release_ca=%d\n", umad_release_ca(&ca));
	printf("unknown_ca=%d\n", umad_get_ca("nosuch0", &ca));
	char issm[256];
	printf("open_unknown_ca=%d\n", umad_open_port("nosuch0", 1));
	printf("open_unknown_ca_port0=%d\n", umad_open_port("nosuch0", 0));
	printf("issm_unknown_ca=%d\n", umad_get_issm_path("nosuch0", 1, issm, sizeof issm));
	printf("issm_unknown_ca_port0=%d\n", umad_get_issm_path("nosuch0", 0, issm, sizeof issm));
	__be64 guids[4];
	r = umad_get_ca_portguids(NULL, guids, 4);
	printf("portguids=%d\n", r);
	for (int i = 0; i < r; i++)
		printf("portguid%d=%016" PRIx64 "\n", i, be64toh(guids[i]));
	printf("portguids_small=%d\n", umad_get_ca_portguids(NULL, guids, 1));
	umad_port_t p;
	printf("get_port=%d\n", umad_get_port(names[0], 1, &p));
	printf("get_port.port_guid=%016" PRIx64 "\n", be64toh(p.port_guid));
	r = umad_release_port(&p);
	printf("release_port=%d pkeys=%p\n", r, (void *)p.pkeys);
	printf("get_port_missing=%d\n", umad_get_port(names[0], 7, &p));
	struct umad_device_node *list = umad_get_ca_device_list();
	int count = 0;
	for (struct umad_device_node *d = list; d; d = d->next)
		count++;
	printf("device_list=%d\n", count);
	printf("sort=%d\n", umad_sort_ca_device_list(&list, 0));
	printf("sort_too_many=%d\n", umad_sort_ca_device_list(&list, count + 1));
	for (struct umad_device_node *d = list; d; d = d->next)
		printf("device=%s\n", d->ca_name);
	umad_free_ca_device_list(list);
	/* libibumad: a size below 2 sorts nothing; otherwise the list must have exactly
	 * `size` nodes (EINVAL, the list untouched, if it has more or fewer). */
	struct umad_device_node nodes[3] = {{&nodes[1], "c"}, {&nodes[2], "a"}, {NULL, "b"}};
	static const size_t sizes[] = {1, 2, 4, 3};
	for (int i = 0; i < 4; i++) {
		struct umad_device_node *h = &nodes[0];
		int r = umad_sort_ca_device_list(&h, sizes[i]);
		printf("sort_size%zu=%d order=", sizes[i], r);
		for (struct umad_device_node *d = h; d; d = d->next)
			printf("%s", d->ca_name);
		printf("\n");
	}
	return 0;
}

static int mode_loopback(void)
{
	printf("size_before_open=%zu\n", umad_size());
	int fd = open_port();
	printf("size=%zu\nmad_offset=%td\n", umad_size(), (char *)umad_get_mad((void *)0x1000) - (char *)0x1000);
	int agent = umad_register(fd, PERF, 1, 0, NULL);
	printf("agent=%d\n", agent);
	int lid = my_lid();
	void *u = alloc_umad();
	perf_get(u, 0x1234abcd);
	umad_set_addr(u, lid, 1, 0, 0x80010000);
	errno = 1234;
	int r = umad_send(fd, agent, u, MAD, 1000, 0);
	printf("send=%d\nerrno_send=%d\n", r, errno);
	/* A buffer shorter than the MAD: EINVAL, and the packet stays queued. */
	int len;
	r = recv_one(fd, u, 100, 2000, &len);
	printf("short_recv=%d errno_short=%d\n", r, errno);
	memset(u, 0, umad_size() + MAD);
	r = recv_one(fd, u, MAD, 2000, &len);
	printf("recv=%d\nlen=%d\nstatus=%d\nerrno_recv=%d\n", r, len, umad_status(u), errno);
	uint8_t *m = umad_get_mad(u);
	uint64_t tid = tid_of(u);
	printf("method=%02x\nmad_status=%04x\ntid_low=%08" PRIx64 "\ntid_high_set=%d\n", m[3],
	       (m[4] << 8) | m[5], tid & 0xffffffff, (tid >> 32) != 0);
	ib_mad_addr_t *a = umad_get_mad_addr(u);
	printf("hdr_length=%u\nsrc_lid=%u\nsrc_qpn=%u\n", ((ib_user_mad_t *)u)->length,
	       ntohs(a->lid), ntohl(a->qpn));
	r = recv_one(fd, u, MAD, 200, &len);
	printf("recv_again=%d\n", r);
	r = recv_one(fd, u, MAD, 0, &len);
	printf("recv_nonblocking=%d errno_nonblocking=%d\n", r, errno);
	printf("unregister=%d\n", umad_unregister(fd, agent));
	printf("close=%d\n", umad_close_port(fd));
	return 0;
}

static int mode_timeout(void)
{
	int fd = open_port();
	int agent = umad_register(fd, PERF, 1, 0, NULL);
	void *u = alloc_umad();
	perf_get(u, 0x77777777);
	umad_set_addr(u, 0x77, 1, 0, 0x80010000); /* no such LID */
	long t0 = now_ms();
	printf("send=%d\n", umad_send(fd, agent, u, MAD, 100, 2));
	int len;
	memset(u, 0, umad_size() + MAD);
	int r = recv_one(fd, u, MAD, 5000, &len);
	long took = now_ms() - t0;
	printf("recv=%d\nlen=%d\nstatus=%d\ntook_ms=%ld\n", r, len, umad_status(u), took);
	ib_user_mad_t *h = u;
	printf("ret_timeout=%u\nret_retries=%u\nret_lid=%u\n", h->timeout_ms, h->retries,
	       ntohs(h->addr.lid));
	uint64_t tid = tid_of(u);
	printf("tid_low=%08" PRIx64 "\ntid_high_set=%d\n", tid & 0xffffffff, (tid >> 32) != 0);
	printf("ret_class=%02x\nret_attr=%04x\n", ((uint8_t *)umad_get_mad(u))[1],
	       (((uint8_t *)umad_get_mad(u))[16] << 8) | ((uint8_t *)umad_get_mad(u))[17]);
	r = recv_one(fd, u, MAD, 500, &len);
	printf("second=%d\n", r);
	/* No timeout: no response is expected, nothing comes back. */
	perf_get(u, 0x88888888);
	umad_set_addr(u, 0x77, 1, 0, 0x80010000);
	printf("send_no_timeout=%d\n", umad_send(fd, agent, u, MAD, 0, 0));
	r = recv_one(fd, u, MAD, 500, &len);
	printf("after_no_timeout=%d\n", r);
	umad_close_port(fd);
	return 0;
}

static int mode_dup(void)
{
	int fd = open_port();
	int a1 = umad_register(fd, PERF, 1, 0, NULL);
	int a2 = umad_register(fd, 0, 0, 0, NULL);
	void *u = alloc_umad();
	perf_get(u, 0x0000000500000042);
	umad_set_addr(u, 0x77, 1, 0, 0x80010000);
	printf("first=%d\n", umad_send(fd, a1, u, MAD, 300, 0));
	perf_get(u, 0x0000000900000042); /* other upper bits, same lower 32 */
	umad_set_addr(u, 0x77, 1, 0, 0x80010000);
	errno = 0;
	int r = umad_send(fd, a1, u, MAD, 300, 0);
	printf("dup=%d errno_dup=%d\n", r, errno);
	printf("other_agent=%d\n", umad_send(fd, a2, u, MAD, 300, 0));
	perf_get(u, 0x43);
	umad_set_addr(u, 0x77, 1, 0, 0x80010000);
	printf("other_tid=%d\n", umad_send(fd, a1, u, MAD, 300, 0));
	int len, n = 0;
	while (recv_one(fd, u, MAD, 2000, &len) >= 0)
		n += umad_status(u) == ETIMEDOUT;
	printf("timeouts=%d\n", n);
	/* The TID is free again once its request ended. */
	perf_get(u, 0x42);
	umad_set_addr(u, 0x77, 1, 0, 0x80010000);
	printf("reuse=%d\n", umad_send(fd, a1, u, MAD, 100, 0));
	umad_close_port(fd);
	return 0;
}

static int mode_agents(void)
{
	int fd = open_port();
	int ids[32], ok = 1;
	for (int i = 0; i < 32; i++) {
		ids[i] = umad_register(fd, 0, 0, 0, NULL);
		ok &= ids[i] == i;
	}
	printf("lowest_first=%d\n", ok);
	errno = 0;
	int r = umad_register(fd, 0, 0, 0, NULL);
	printf("thirty_third=%d errno_full=%d\n", r, errno);
	printf("unregister5=%d\n", umad_unregister(fd, 5));
	printf("again=%d\n", umad_register(fd, 0, 0, 0, NULL));
	errno = 0;
	r = umad_unregister(fd, 40);
	printf("unregister40=%d errno40=%d\n", r, errno);
	umad_unregister(fd, 6);
	errno = 0;
	r = umad_unregister(fd, 6);
	printf("unregister6_twice=%d errno6=%d\n", r, errno);
	void *u = alloc_umad();
	perf_get(u, 1);
	errno = 0;
	r = umad_send(fd, 6, u, MAD, 0, 0);
	printf("send_unregistered=%d errno_send=%d\n", r, errno);
	errno = 0;
	r = umad_send(fd, 0, u, 20, 0, 0);
	printf("send_short=%d errno_short=%d\n", r, errno);
	errno = 0;
	r = umad_send(fd, 0, u, MAD + 8, 0, 0);
	printf("send_long=%d errno_long=%d\n", r, errno);
	/* Registrations the kernel refuses. */
	long mask[2] = {1 << 1, 0};
	errno = 0;
	r = umad_register(fd, 0x90, 1, 0, mask);
	printf("bad_class=%d errno_bad_class=%d\n", r, errno);
	int fd2 = umad_open_port(NULL, 0);
	int held = umad_register(fd2, PERF, 1, 0, mask);
	errno = 0;
	r = umad_register(fd, PERF, 1, 0, mask); /* slot 6 is free */
	printf("conflict=%d errno_conflict=%d held=%d\n", r, errno, held >= 0);
	umad_close_port(fd2);
	umad_close_port(fd);
	return 0;
}

static int mode_register2(void)
{
	int fd = open_port();
	struct umad_reg_attr at = {.mgmt_class = PERF, .mgmt_class_version = 1};
	uint32_t id = 99;
	int r = umad_register2(fd, &at, &id);
	printf("reg2=%d id=%u\n", r, id);
	at.flags = 2;
	r = umad_register2(fd, &at, &id);
	printf("reg2_flags=%d flags_after=%u\n", r, at.flags);
	struct umad_reg_attr v = {.mgmt_class = 0x30, .mgmt_class_version = 1, .oui = 0};
	printf("reg2_no_oui=%d\n", umad_register2(fd, &v, &id));
	v.oui = 0x001405;
	printf("reg2_oui=%d\n", umad_register2(fd, &v, &id));
	uint8_t oui[3] = {0x00, 0x02, 0xc9};
	printf("oui_bad_class=%d\n", umad_register_oui(fd, 0x20, 0, oui, NULL));
	printf("oui_ok=%d\n", umad_register_oui(fd, 0x31, 0, oui, NULL) >= 0);
	printf("null_attr=%d\n", umad_register2(fd, NULL, &id));
	/* A wide OUI with a class: REGISTER_AGENT2 refuses it; without flags libibumad's
	 * retry through REGISTER_AGENT (3-byte OUI) registers, with flags it cannot. */
	struct umad_reg_attr w = {.mgmt_class = PERF, .mgmt_class_version = 1, .oui = 0x01001405};
	id = 99;
	r = umad_register2(fd, &w, &id);
	printf("reg2_wide_oui=%d id_set=%d\n", r, id != 99);
	struct umad_reg_attr ws = {.mgmt_class = 0x03, .mgmt_class_version = 2, .rmpp_version = 1,
				   .flags = UMAD_USER_RMPP, .oui = 0x01001405};
	id = 99;
	r = umad_register2(fd, &ws, &id);
	printf("reg2_wide_oui_flags=%d id=%u flags_after=%u\n", r, id, ws.flags);
	ws.oui = 0x001405;
	ws.flags = UMAD_USER_RMPP;
	printf("reg2_narrow_oui_flags=%d\n", umad_register2(fd, &ws, &id));
	umad_close_port(fd);
	return 0;
}

static int mode_poll(void)
{
	int fd = open_port();
	int agent = umad_register(fd, PERF, 1, 0, NULL);
	printf("poll_empty=%d\n", umad_poll(fd, 0));
	printf("get_fd_same=%d\n", umad_get_fd(fd) == fd);
	struct pollfd p = {.fd = umad_get_fd(fd), .events = POLLIN};
	printf("sys_poll_empty=%d\n", poll(&p, 1, 0));
	void *u = alloc_umad();
	perf_get(u, 7);
	umad_set_addr(u, my_lid(), 1, 0, 0x80010000);
	umad_send(fd, agent, u, MAD, 1000, 0);
	p.revents = 0;
	int n = poll(&p, 1, 2000);
	printf("sys_poll=%d revents_in=%d\n", n, (p.revents & POLLIN) != 0);
	printf("poll_ready=%d\n", umad_poll(fd, 0));
	int len;
	errno = 1234;
	printf("recv=%d\n", recv_one(fd, u, MAD, 0, &len) >= 0);
	/* libibumad sets errno to 0 on entry; a successful read leaves it so. */
	printf("errno_recv=%d\n", errno);
	p.revents = 0;
	printf("sys_poll_after=%d\n", poll(&p, 1, 0));
	long t0 = now_ms();
	printf("poll_timeout=%d\n", umad_poll(fd, 150));
	printf("poll_waited=%d\n", now_ms() - t0 >= 140);
	umad_close_port(fd);
	return 0;
}

/* Two responses arrive in one pass while the reader waits in umad_recv: the one it does
 * not take must still make the fd readable for poll(2), without another library call. */
static int mode_leftover(void)
{
	int fd = open_port();
	int agent = umad_register(fd, PERF, 1, 0, NULL);
	void *u = alloc_umad();
	for (int i = 0; i < 2; i++) {
		perf_get(u, 20 + i);
		umad_set_addr(u, my_lid(), 1, 0, 0x80010000);
		umad_send(fd, agent, u, MAD, 1000, 0);
	}
	int len;
	printf("first=%d\n", recv_one(fd, u, MAD, -1, &len) >= 0);
	struct pollfd p = {.fd = umad_get_fd(fd), .events = POLLIN};
	int n = poll(&p, 1, 2000);
	printf("sys_poll=%d revents_in=%d\n", n, (p.revents & POLLIN) != 0);
	printf("second=%d\n", recv_one(fd, u, MAD, 0, &len) >= 0);
	p.revents = 0;
	printf("sys_poll_after=%d\n", poll(&p, 1, 0));
	umad_close_port(fd);
	return 0;
}

static int cancel_fd;
static void *blocked_reader(void *arg)
{
	(void)arg;
	void *u = alloc_umad();
	int len = MAD;
	umad_recv(cancel_fd, u, &len, -1);
	return (void *)1;
}

static int mode_cancel(void)
{
	cancel_fd = open_port();
	umad_register(cancel_fd, PERF, 1, 0, NULL);
	pthread_t t;
	pthread_create(&t, NULL, blocked_reader, NULL);
	usleep(200000);
	printf("cancel=%d\n", pthread_cancel(t));
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 5;
	void *ret = NULL;
	int r = pthread_timedjoin_np(t, &ret, &dl);
	printf("joined=%d canceled=%d\n", r == 0, ret == PTHREAD_CANCELED);
	printf("close=%d\n", umad_close_port(cancel_fd));
	return 0;
}

static unsigned capmask(void)
{
	umad_port_t p;
	umad_get_port(NULL, 0, &p);
	unsigned m = ntohl(p.capmask);
	umad_release_port(&p);
	return m;
}

static int wait_issm(int want)
{
	long t0 = now_ms();
	while (now_ms() - t0 < 3000) {
		if (((capmask() & 2) != 0) == want)
			return 1;
		usleep(10000);
	}
	return 0;
}

static int mode_issm(void)
{
	char path[256];
	int r = umad_get_issm_path(NULL, 0, path, sizeof(path));
	printf("issm_path=%d\nissm_before=%d\n", r, (capmask() & 2) != 0);
	int fd = open(path, O_NONBLOCK);
	printf("issm_open=%d\n", fd >= 0);
	printf("issm_set=%d\n", wait_issm(1));
	close(fd);
	printf("issm_cleared=%d\n", wait_issm(0));
	/* Truncated like snprintf. */
	char small[8];
	umad_get_issm_path(NULL, 0, small, sizeof(small));
	printf("issm_small_len=%zu\n", strlen(small));
	return 0;
}

/* The helpers only touch the caller's buffer: their bytes can be compared with
 * Debian's library, before any port is opened (then both use the 56-byte header). */
/* The header helpers on `buf`; mode_helpers_odd passes a buffer at an odd address: C
 * callers may (the helpers take a void *), and libibumad's work on any address on x86. */
static int helpers(uint8_t *buf)
{
	memset(buf, 0xee, 512);
	printf("size=%zu\n", umad_size());
	printf("mad_offset=%td\n", (uint8_t *)umad_get_mad(buf) - buf);
	umad_set_addr(buf, 0x1234, 1, 5, 0x80010000);
	umad_set_pkey(buf, 3);
	printf("get_pkey=%d\n", umad_get_pkey(buf));
	ib_mad_addr_t g;
	memset(&g, 0, sizeof(g));
	memset(g.gid, 0xab, 16);
	g.flow_label = 0x12345;
	g.hop_limit = 7;
	g.traffic_class = 9;
	umad_set_grh(buf, &g);
	printf("addr_ptr=%td\n", (uint8_t *)umad_get_mad_addr(buf) - buf);
	printf("status=%d\n", umad_status(buf));
	for (int i = 0; i < 64; i++)
		printf("b%d=%02x\n", i, buf[i]);
	umad_set_addr_net(buf, htons(0x4321), htonl(1), 2, htonl(0x80010000));
	umad_set_grh(buf, NULL);
	for (int i = 0; i < 64; i++)
		printf("c%d=%02x\n", i, buf[i]);
	printf("debug=%d\n", umad_debug(-1));
	printf("debug_set=%d\n", umad_debug(0));
	return 0;
}

static int mode_helpers(void)
{
	static uint64_t buf[512 / 8];
	return helpers((uint8_t *)buf);
}

static int mode_helpers_odd(void)
{
	static uint64_t buf[520 / 8];
	return helpers((uint8_t *)buf + 1);
}

/* umad_send and umad_recv with a buffer at an odd address. */
static int mode_io_odd(void)
{
	int fd = open_port();
	int agent = umad_register(fd, PERF, 1, 0, NULL);
	uint8_t *mem = calloc(1, umad_size() + MAD + 8);
	void *u = mem + 3;
	perf_get(u, 0x0dd);
	umad_set_addr(u, my_lid(), 1, 0, 0x80010000);
	umad_set_grh(u, NULL);
	umad_set_pkey(u, 0);
	printf("get_pkey=%d\n", umad_get_pkey(u));
	printf("send=%d\n", umad_send(fd, agent, u, MAD, 1000, 0));
	int len;
	int r = recv_one(fd, u, MAD, 2000, &len);
	printf("recv=%d len=%d status=%d tid_low=%08" PRIx64 "\n", r, len, umad_status(u),
	       tid_of(u) & 0xffffffff);
	umad_close_port(fd);
	return 0;
}

static int mode_strings(void)
{
	for (int c = 0; c < 256; c++) {
		printf("class%d=%s\n", c, umad_class_str(c));
		for (int m = 0; m < 256; m++)
			printf("method%d.%d=%s\n", c, m, umad_method_str(c, m));
		for (int a = 0; a < 0x40; a++)
			printf("attr%d.%d=%s\n", c, a, umad_attribute_str(c, htons(a)));
		for (int a = 0xf0; a < 0x100; a++)
			printf("attr%d.%d=%s\n", c, a, umad_attribute_str(c, htons(a)));
	}
	for (int s = 0; s < 0x10000; s += 1) {
		printf("common%d=%s\n", s, umad_common_mad_status_str(htons(s)));
		if ((s & 0xff) == 0)
			printf("sa%d=%s\n", s, umad_sa_mad_status_str(htons(s)));
	}
	return 0;
}

/* umad_send with a length longer than the buffer, which ends at an inaccessible page: the
 * kernel reads the header and the MAD's first 36 bytes, refuses the length (EINVAL) and
 * never reads the rest. A length that fits is sent from the same buffer. */
static int mode_overlong(void)
{
	int fd = open_port();
	int agent = umad_register(fd, PERF, 1, 0, NULL);
	long pg = sysconf(_SC_PAGESIZE);
	uint8_t *mem = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED || mprotect(mem + pg, pg, PROT_NONE))
		return 4;
	void *u = mem + pg - (umad_size() + MAD);
	perf_get(u, 0x0be7);
	umad_set_addr(u, my_lid(), 1, 0, 0x80010000);
	errno = 0;
	int r = umad_send(fd, agent, u, 4096, 1000, 0);
	printf("overlong=%d errno_overlong=%d\n", r, errno);
	errno = 0;
	r = umad_send(fd, agent, u, MAD + 1, 1000, 0);
	printf("one_over=%d errno_one_over=%d\n", r, errno);
	errno = 0;
	r = umad_send(fd, 9, u, 4096, 1000, 0);
	printf("overlong_no_agent=%d errno_no_agent=%d\n", r, errno);
	printf("fits=%d\n", umad_send(fd, agent, u, MAD, 1000, 0));
	int len;
	r = recv_one(fd, u, MAD, 2000, &len);
	printf("answer=%d status=%d tid_low=%08" PRIx64 "\n", r, umad_status(u),
	       tid_of(u) & 0xffffffff);
	umad_close_port(fd);
	return 0;
}

/* The program closes a umad fd itself (libibumad's umad_close_port is a plain close) and
 * the number comes back: from umad_open_port, or from an unrelated open(2). */
static int mode_reclose(void)
{
	long mask[16 / sizeof(long)] = {1 << 1};
	int fd = open_port();
	printf("first_reg=%d\n", umad_register(fd, 0x21, 1, 0, mask));
	close(fd);
	int fd2 = umad_open_port(NULL, 0);
	printf("same_number=%d\n", fd2 == fd);
	printf("fd2_open=%d\n", fcntl(fd2, F_GETFD) >= 0);
	/* The closed file's agent is gone, as the kernel releases it on close. */
	errno = 0;
	int r = umad_register(fd2, 0x21, 1, 0, mask);
	printf("reregister=%d errno_reregister=%d\n", r, errno);
	int agent = umad_register(fd2, PERF, 1, 0, NULL);
	void *u = alloc_umad();
	perf_get(u, 0x5e1);
	umad_set_addr(u, my_lid(), 1, 0, 0x80010000);
	printf("send=%d\n", umad_send(fd2, agent, u, MAD, 1000, 0));
	struct pollfd p = {.fd = fd2, .events = POLLIN};
	int n = poll(&p, 1, 2000);
	printf("sys_poll=%d revents_in=%d\n", n, (p.revents & POLLIN) != 0);
	int len;
	r = recv_one(fd2, u, MAD, 0, &len);
	printf("recv=%d status=%d\n", r, umad_status(u));
	int other = open("/dev/null", O_RDONLY);
	printf("other_differs=%d\n", other != fd2);
	printf("close_port=%d\n", umad_close_port(fd2));
	printf("fd2_closed=%d\n", fcntl(fd2, F_GETFD) < 0 && errno == EBADF);
	printf("other_open=%d\n", fcntl(other, F_GETFD) >= 0);
	close(other);
	/* A closed umad fd's number taken by an unrelated file: umad_close_port of that
	 * number leaves the file open. */
	int fd3 = umad_open_port(NULL, 0);
	close(fd3);
	int unrelated = open("/dev/null", O_RDONLY);
	printf("unrelated_same_number=%d\n", unrelated == fd3);
	printf("close_unrelated=%d\n", umad_close_port(unrelated));
	printf("unrelated_open=%d\n", fcntl(unrelated, F_GETFD) >= 0);
	close(unrelated);
	return 0;
}

/* As mode_leftover, while another thread waits in umad_recv on a second fd of the same
 * port: the response left queued on the first fd must still make it readable. */
static int other_fd;
static void *other_reader(void *arg)
{
	(void)arg;
	void *u = alloc_umad();
	int len = MAD;
	umad_recv(other_fd, u, &len, -1);
	return NULL;
}

static int mode_leftover_other(void)
{
	int fd = open_port();
	int agent = umad_register(fd, PERF, 1, 0, NULL);
	other_fd = umad_open_port(NULL, 0);
	umad_register(other_fd, 0x21, 1, 0, NULL);
	pthread_t t;
	pthread_create(&t, NULL, other_reader, NULL);
	usleep(100000);
	void *u = alloc_umad();
	int rounds = 5, readable = 0, second = 0;
	for (int i = 0; i < rounds; i++) {
		for (int k = 0; k < 2; k++) {
			perf_get(u, 0x100 * i + k);
			umad_set_addr(u, my_lid(), 1, 0, 0x80010000);
			umad_send(fd, agent, u, MAD, 1000, 0);
		}
		int len;
		if (recv_one(fd, u, MAD, -1, &len) < 0)
			return 5;
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 1000) == 1 && (p.revents & POLLIN))
			readable++;
		if (recv_one(fd, u, MAD, 0, &len) >= 0)
			second++;
	}
	printf("readable=%d/%d\n", readable, rounds);
	printf("second=%d/%d\n", second, rounds);
	pthread_cancel(t);
	pthread_join(t, NULL);
	umad_close_port(other_fd);
	umad_close_port(fd);
	return 0;
}

/* A cancel pending when an entry point is called (OpenSM's threads are cancelled at any
 * time): the library must return normally, the cancel acting at the caller's next
 * cancellation point, never abort the process. */
static int pc_fd, pc_agent, pc_lid;
static const char *pc_what;
static volatile int pc_returned;
static void *pending_cancel(void *arg)
{
	(void)arg;
	int old;
	void *u = alloc_umad();
	perf_get(u, 0xca);
	umad_set_addr(u, pc_lid, 1, 0, 0x80010000);
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
	pthread_cancel(pthread_self());
	pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &old);
	const char *w = pc_what;
	int len = MAD;
	umad_port_t port;
	umad_ca_t ca;
	char names[4][UMAD_CA_NAME_LEN];
	if (!strcmp(w, "send"))
		umad_send(pc_fd, pc_agent, u, MAD, 1000, 0);
	else if (!strcmp(w, "recv0"))
		umad_recv(pc_fd, u, &len, 0);
	else if (!strcmp(w, "register"))
		umad_register(pc_fd, 0x21, 1, 0, NULL);
	else if (!strcmp(w, "unregister"))
		umad_unregister(pc_fd, pc_agent);
	else if (!strcmp(w, "get_port") && !umad_get_port(NULL, 0, &port))
		umad_release_port(&port);
	else if (!strcmp(w, "get_ca") && !umad_get_ca(NULL, &ca))
		umad_release_ca(&ca);
	else if (!strcmp(w, "cas_names"))
		umad_get_cas_names(names, 4);
	else if (!strcmp(w, "open_close"))
		umad_close_port(umad_open_port(NULL, 0));
	else if (!strcmp(w, "dump"))
		umad_dump(u);
	pc_returned = 1;
	pthread_testcancel();
	return NULL;
}

static int mode_cancel_pending(void)
{
	static const char *what[] = {"send", "recv0", "register", "unregister", "get_port",
				     "get_ca", "cas_names", "open_close", "dump"};
	pc_fd = open_port();
	pc_lid = my_lid();
	for (unsigned i = 0; i < sizeof(what) / sizeof(what[0]); i++) {
		pc_agent = umad_register(pc_fd, PERF, 1, 0, NULL);
		pc_what = what[i];
		pc_returned = 0;
		pthread_t t;
		void *ret = NULL;
		pthread_create(&t, NULL, pending_cancel, NULL);
		pthread_join(t, &ret);
		printf("%s=returned %d canceled %d\n", what[i], pc_returned,
		       ret == PTHREAD_CANCELED);
		umad_unregister(pc_fd, pc_agent);
	}
	umad_close_port(pc_fd);
	return 0;
}

/* stderr is a pipe nobody reads any more (EPIPE, SIGPIPE ignored): the library's warnings
 * (umad_debug, umad_dump) fail to write, which must change nothing. */
static int mode_broken_stderr(void)
{
	signal(SIGPIPE, SIG_IGN);
	int p[2];
	if (pipe(p))
		return 4;
	close(p[0]);
	dup2(p[1], 2);
	void *u = alloc_umad();
	umad_dump(u);
	printf("dump_survived=1\n");
	umad_debug(1);
	int fd = umad_open_port(NULL, 0);
	printf("open_debug=%d\n", fd >= 0);
	errno = 0;
	int r = umad_send(fd, 9, u, MAD, 0, 0);
	printf("send_unregistered=%d errno_send=%d\n", r, errno);
	printf("close=%d\n", umad_close_port(fd));
	return 0;
}

/* UMAD_USER_RMPP registrations are checked as ib_register_mad_agent checks them, with the
 * RMPP version given: 0 or 1, an RMPP-capable class, and a class at all. */
static int mode_user_rmpp(void)
{
	int fd = open_port();
	uint32_t id = 99;
	struct umad_reg_attr a = {.mgmt_class = PERF, .mgmt_class_version = 1,
				  .flags = UMAD_USER_RMPP, .rmpp_version = 1};
	int r = umad_register2(fd, &a, &id);
	printf("perf_rmpp1=%d id=%u flags_after=%u\n", r, id, a.flags);
	struct umad_reg_attr b = {.mgmt_class = 0, .flags = UMAD_USER_RMPP};
	r = umad_register2(fd, &b, &id);
	printf("no_class=%d id=%u\n", r, id);
	struct umad_reg_attr c = {.mgmt_class = 0x03, .mgmt_class_version = 2,
				  .flags = UMAD_USER_RMPP, .rmpp_version = 5};
	r = umad_register2(fd, &c, &id);
	printf("sa_rmpp5=%d id=%u\n", r, id);
	struct umad_reg_attr d = {.mgmt_class = 0x03, .mgmt_class_version = 2,
				  .flags = UMAD_USER_RMPP, .rmpp_version = 1};
	r = umad_register2(fd, &d, &id);
	printf("sa_rmpp1=%d id=%u\n", r, id);
	struct umad_reg_attr e = {.mgmt_class = PERF, .mgmt_class_version = 1,
				  .flags = UMAD_USER_RMPP};
	r = umad_register2(fd, &e, &id);
	printf("perf_rmpp0=%d id=%u\n", r, id);
	umad_close_port(fd);
	return 0;
}

/* umad_register takes the class as an int and picks the QP on it before the kernel sees
 * the byte: 0x101 is class 0x01 on QP1, which the kernel refuses. */
static int mode_class_int(void)
{
	int fd = open_port();
	errno = 0;
	int r = umad_register(fd, 0x101, 1, 0, NULL);
	printf("class_0x101=%d errno_0x101=%d\n", r, errno);
	errno = 0;
	r = umad_register(fd, 0x181, 1, 0, NULL);
	printf("class_0x181=%d errno_0x181=%d\n", r, errno);
	printf("class_0x104=%d\n", umad_register(fd, 0x104, 1, 0, NULL));
	printf("class_0x01=%d\n", umad_register(fd, 0x01, 1, 0, NULL));
	umad_close_port(fd);
	return 0;
}

/* umad_recv with a negative *length: EINVAL at once (the kernel's read refuses a count
 * below the header's size), *length untouched, the queued MAD still there. */
static int mode_recv_negative(void)
{
	int fd = open_port();
	int agent = umad_register(fd, PERF, 1, 0, NULL);
	void *u = alloc_umad();
	int len = -5;
	errno = 0;
	long t0 = now_ms();
	int r = umad_recv(fd, u, &len, 1000);
	printf("empty=%d errno_empty=%d len_empty=%d at_once=%d\n", r, errno, len,
	       now_ms() - t0 < 500);
	perf_get(u, 0x4e9);
	umad_set_addr(u, my_lid(), 1, 0, 0x80010000);
	umad_send(fd, agent, u, MAD, 1000, 0);
	struct pollfd p = {.fd = fd, .events = POLLIN};
	poll(&p, 1, 2000);
	len = -1;
	errno = 0;
	r = umad_recv(fd, u, &len, -1);
	printf("queued=%d errno_queued=%d len_queued=%d\n", r, errno, len);
	r = recv_one(fd, u, MAD, 0, &len);
	printf("then=%d len=%d\n", r, len);
	umad_close_port(fd);
	return 0;
}

/* A PerfMgt Get to our own port and its answer: "ret status" (ret -1 when the send fails). */
static void round_trip(const char *key, int fd, int agent, int lid, uint64_t tid)
{
	void *u = alloc_umad();
	perf_get(u, tid);
	umad_set_addr(u, lid, 1, 0, 0x80010000);
	int r = umad_send(fd, agent, u, MAD, 1000, 0);
	int len = MAD;
	if (r == 0)
		r = umad_recv(fd, u, &len, 2000);
	else
		r = -1;
	printf("%s=%d status=%d\n", key, r, r >= 0 ? umad_status(u) : -1);
	free(u);
}

static void child_status(const char *key, pid_t pid)
{
	int st;
	waitpid(pid, &st, 0);
	printf("%s=%s %d\n", key, WIFSIGNALED(st) ? "signal" : "code",
	       WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
}

/* A child of fork() after the parent used the library: every call that needs the device
 * fails as on a removed device (no signal), names are still listed, and exit() leaves the
 * parent's port alone. */
static int mode_fork_use(void)
{
	int lid = my_lid();
	int fd = open_port();
	int agent = umad_register(fd, PERF, 1, 0, NULL);
	printf("agent=%d\n", agent);
	pid_t pid = fork();
	if (pid == 0) {
		umad_port_t p;
		umad_ca_t ca;
		char names[4][UMAD_CA_NAME_LEN];
		printf("child_get_port=%d\n", umad_get_port(NULL, 0, &p));
		printf("child_get_port_named=%d\n", umad_get_port("mlx5_0", 1, &p));
		printf("child_get_ca=%d\n", umad_get_ca("mlx5_0", &ca));
		printf("child_cas=%d\n", umad_get_cas_names(names, 4));
		printf("child_open=%d\n", umad_open_port(NULL, 0));
		printf("child_open_named=%d\n", umad_open_port("mlx5_0", 1));
		void *u = alloc_umad();
		perf_get(u, 0x99);
		umad_set_addr(u, lid, 1, 0, 0x80010000);
		int r = umad_send(fd, agent, u, MAD, 100, 0);
		printf("child_send=%d errno=%d\n", r, errno);
		int len = MAD;
		r = umad_recv(fd, u, &len, 100);
		printf("child_recv=%d errno=%d\n", r, errno);
		printf("child_poll=%d\n", umad_poll(fd, 100));
		r = umad_register(fd, PERF, 1, 0, NULL);
		printf("child_register=%d errno=%d\n", r, errno);
		r = umad_unregister(fd, agent);
		printf("child_unregister=%d errno=%d\n", r, errno);
		printf("child_close=%d\n", umad_close_port(fd));
		exit(0);
	}
	child_status("child", pid);
	/* The parent's fd and agent work as before. */
	round_trip("parent_rt", fd, agent, lid, 0x4242);
	printf("close=%d\n", umad_close_port(fd));
	return 0;
}

/* A child that exits with exit() after the parent took the issm file: the parent's IsSM
 * and issm file stay. */
static int mode_fork_exit(void)
{
	char path[256];
	printf("issm_path=%d\n", umad_get_issm_path(NULL, 0, path, sizeof(path)));
	int issm = open(path, O_NONBLOCK);
	printf("issm_set=%d\n", wait_issm(1));
	pid_t pid = fork();
	if (pid == 0)
		exit(0);
	child_status("child", pid);
	printf("issm_exists=%d\n", access(path, F_OK) == 0);
	printf("issm_still_set=%d\n", (capmask() & 2) != 0);
	close(issm);
	printf("issm_cleared=%d\n", wait_issm(0));
	return 0;
}

static volatile sig_atomic_t alarms;

static void on_alarm(int s)
{
	(void)s;
	alarms++;
}

/* A hung wait fails the test here rather than at the harness's time limit. */
static void *watchdog(void *arg)
{
	(void)arg;
	sleep(20);
	printf("hung=1\n");
	_exit(3);
}

static void alarm_handler(int flags)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = flags;
	sigaction(SIGALRM, &sa, NULL);
}

/* A signal caught while umad_recv or umad_poll waits ends the wait as poll(2)'s EINTR
 * ends libibumad's: -EIO with errno EINTR (with or without SA_RESTART: poll is never
 * restarted). An ignored signal ends nothing. */
static int mode_eintr(void)
{
	/* The watchdog must not take the SIGALRMs meant for the waiting thread. */
	sigset_t alrm, old;
	sigemptyset(&alrm);
	sigaddset(&alrm, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &alrm, &old);
	pthread_t w;
	pthread_create(&w, NULL, watchdog, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	int lid = my_lid();
	int fd = open_port();
	int agent = umad_register(fd, PERF, 1, 0, NULL);
	void *u = alloc_umad();
	alarm_handler(0);
	int len = MAD;
	alarm(1);
	int r = umad_recv(fd, u, &len, -1);
	printf("recv_forever=%d errno=%d alarms=%d len=%d\n", r, errno, alarms, len);
	alarm(1);
	long t0 = now_ms();
	r = umad_poll(fd, 3000);
	int e = errno;
	printf("poll=%d errno=%d before_timeout=%d\n", r, e, now_ms() - t0 < 3000);
	alarm_handler(SA_RESTART);
	alarm(1);
	len = MAD;
	r = umad_recv(fd, u, &len, 3000);
	printf("recv_restart=%d errno=%d\n", r, errno);
	signal(SIGALRM, SIG_IGN);
	alarm(1);
	r = umad_poll(fd, 1500);
	printf("poll_ignored=%d\n", r);
	/* Nothing is left behind: the signal mask, the fd, the agent. */
	sigset_t now;
	pthread_sigmask(SIG_SETMASK, NULL, &now);
	printf("mask_restored=%d\n", !sigismember(&now, SIGALRM) && !sigismember(&now, SIGINT));
	round_trip("after", fd, agent, lid, 0x5151);
	printf("close=%d\n", umad_close_port(fd));
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		return 64;
	const char *m = argv[1];
	if (!strcmp(m, "enum"))
		return mode_enum();
	if (!strcmp(m, "loopback"))
		return mode_loopback();
	if (!strcmp(m, "timeout"))
		return mode_timeout();
	if (!strcmp(m, "dup"))
		return mode_dup();
	if (!strcmp(m, "agents"))
		return mode_agents();
	if (!strcmp(m, "register2"))
		return mode_register2();
	if (!strcmp(m, "poll"))
		return mode_poll();
	if (!strcmp(m, "cancel"))
		return mode_cancel();
	if (!strcmp(m, "leftover"))
		return mode_leftover();
	if (!strcmp(m, "overlong"))
		return mode_overlong();
	if (!strcmp(m, "reclose"))
		return mode_reclose();
	if (!strcmp(m, "leftover_other"))
		return mode_leftover_other();
	if (!strcmp(m, "cancel_pending"))
		return mode_cancel_pending();
	if (!strcmp(m, "broken_stderr"))
		return mode_broken_stderr();
	if (!strcmp(m, "user_rmpp"))
		return mode_user_rmpp();
	if (!strcmp(m, "class_int"))
		return mode_class_int();
	if (!strcmp(m, "recv_negative"))
		return mode_recv_negative();
	if (!strcmp(m, "helpers_odd"))
		return mode_helpers_odd();
	if (!strcmp(m, "io_odd"))
		return mode_io_odd();
	if (!strcmp(m, "issm"))
		return mode_issm();
	if (!strcmp(m, "helpers"))
		return mode_helpers();
	if (!strcmp(m, "fork_use"))
		return mode_fork_use();
	if (!strcmp(m, "fork_exit"))
		return mode_fork_exit();
	if (!strcmp(m, "eintr"))
		return mode_eintr();
	if (!strcmp(m, "strings"))
		return mode_strings();
	return 64;
}
