/*
 * doca_sim.c -- a SIMULATED DOCA SDK for dgl-sni's tests. This is NOT NVIDIA DOCA.
 *
 * It implements, with the public C signatures of DOCA 2.x, only the functions that
 * dpu_agent/doca/bindings.py binds, so that the agent's DOCA path can be built and tested on a
 * plain Linux host. No NVIDIA header or code is used; every prototype is declared here.
 *
 * What it models:
 *  - one device, PCI address 0000:03:00.0, with DMA memcpy and Comch client/server
 *    support, and one network representor (PCI b1:00.0, the host function it stands for);
 *  - doca_error_t codes, state rules (started/stopped mmaps, idle/running contexts,
 *    outstanding buffers/tasks block destruction) and argument checks;
 *  - doca_mmap: a local mmap remembers (pid, address, length, permissions); the PCI export
 *    descriptor is an opaque blob encoding them; doca_mmap_create_from_export() in another
 *    process decodes it into a "remote" mmap;
 *  - DMA memcpy tasks run when doca_pe_progress() is called and really move bytes across
 *    processes with process_vm_readv/process_vm_writev (the DMA engine touches the other
 *    side's memory without its CPU); remote permissions are enforced (PCI read-only maps
 *    cannot be written); the max buffer size is DOCA_SIM_MAX_BUF_SIZE (default 1 MiB);
 *  - Comch: the server listens on an abstract-namespace Unix SOCK_SEQPACKET socket named
 *    after the service ("\0doca-sim-comch/<name>"); the client context starts in STARTING
 *    and becomes RUNNING once connected (it retries while no server listens); messages,
 *    connection and disconnection events and send completions are delivered through the
 *    registered callbacks from doca_pe_progress(); max message size 4080 bytes.
 *
 * What it does not model: real PCIe/IOMMU access and its performance, notification
 * handles (epoll), task batches, more than one device, multiple devices per mmap, buffer
 * lists, Comch consumer/producer fast path, what real hardware does when a Comch peer
 * vanishes (here a client whose server goes away leaves the RUNNING state).
 *
 * Built three times from this one file (see build.py):
 *   -DSIM_COMMON -> libdoca_common.so  (errors, devices, mmap, buffers, progress engine)
 *   -DSIM_DMA    -> libdoca_dma.so     (links libdoca_common.so)
 *   -DSIM_COMCH  -> libdoca_comch.so   (links libdoca_common.so)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

/* ------------------------------------------------------------------ public types */
typedef enum {
	DOCA_SUCCESS = 0, DOCA_ERROR_UNKNOWN = 1, DOCA_ERROR_NOT_PERMITTED = 2, DOCA_ERROR_IN_USE = 3,
	DOCA_ERROR_NOT_SUPPORTED = 4, DOCA_ERROR_AGAIN = 5, DOCA_ERROR_INVALID_VALUE = 6,
	DOCA_ERROR_NO_MEMORY = 7, DOCA_ERROR_INITIALIZATION = 8, DOCA_ERROR_TIME_OUT = 9,
	DOCA_ERROR_SHUTDOWN = 10, DOCA_ERROR_CONNECTION_RESET = 11, DOCA_ERROR_CONNECTION_ABORTED = 12,
	DOCA_ERROR_CONNECTION_INPROGRESS = 13, DOCA_ERROR_NOT_CONNECTED = 14, DOCA_ERROR_NO_LOCK = 15,
	DOCA_ERROR_NOT_FOUND = 16, DOCA_ERROR_IO_FAILED = 17, DOCA_ERROR_BAD_STATE = 18,
	DOCA_ERROR_UNSUPPORTED_VERSION = 19, DOCA_ERROR_OPERATING_SYSTEM = 20, DOCA_ERROR_DRIVER = 21,
	DOCA_ERROR_UNEXPECTED = 22, DOCA_ERROR_ALREADY_EXIST = 23, DOCA_ERROR_FULL = 24,
	DOCA_ERROR_EMPTY = 25, DOCA_ERROR_IN_PROGRESS = 26, DOCA_ERROR_TOO_BIG = 27,
} doca_error_t;

union doca_data {
	void *ptr;
	uint64_t u64;
};

enum { CTX_IDLE = 0, CTX_STARTING = 1, CTX_RUNNING = 2, CTX_STOPPING = 3 };
enum { ACC_LOCAL_RW = 1 << 0, ACC_PCI_RO = 1 << 4, ACC_PCI_RW = 1 << 5 };
#define REP_FILTER_NET (1 << 1)

/* ------------------------------------------------------------------ shared internals */
struct doca_devinfo {
	char pci[16];
	struct doca_dev *opened; /* the (single) open instance, refcounted */
};
struct doca_dev {
	struct doca_devinfo *info;
	int refs;
};
struct doca_devinfo_rep {
	char pci[16];
	struct doca_dev *parent;
};
struct doca_dev_rep {
	struct doca_devinfo_rep info;
};

struct doca_mmap {
	int started, exported, from_export;
	uint32_t perms;
	pid_t pid; /* process owning the memory range */
	uint64_t addr, len;
	int has_range;
	struct doca_dev *dev;
	int nbufs; /* doca_bufs pointing into this mmap */
	unsigned char desc[64];
};

struct doca_buf {
	struct doca_buf_inventory *inv;
	struct doca_mmap *mmap;
	char *head, *data;
	size_t len, data_len;
	uint16_t refcount;
};
struct doca_buf_inventory {
	size_t n, used;
	int started;
	struct doca_buf *bufs;
};

struct doca_ctx;
struct doca_task;
struct sim_ctx_ops {
	doca_error_t (*start)(struct doca_ctx *);
	doca_error_t (*stop)(struct doca_ctx *);
	int (*progress)(struct doca_ctx *);
	doca_error_t (*submit)(struct doca_task *);
	void (*task_free)(struct doca_task *);
};
struct doca_ctx {
	const struct sim_ctx_ops *ops;
	struct doca_pe *pe;
	int state;
	union doca_data user_data;
};
struct doca_task {
	struct doca_ctx *ctx;
	doca_error_t status;
	int allocated, submitted;
	struct doca_task *next; /* completion queue */
};
#define SIM_MAX_CTX 16
struct doca_pe {
	struct doca_ctx *ctxs[SIM_MAX_CTX];
	int nctx;
};

/* exported from libdoca_common for the context libraries (not DOCA API) */
void sim_pe_detach(struct doca_ctx *ctx);
struct doca_devinfo *doca_dev_as_devinfo(const struct doca_dev *dev);

/* ================================================================== libdoca_common */
#ifdef SIM_COMMON

static const char *const NAMES[] = {
	"DOCA_SUCCESS", "DOCA_ERROR_UNKNOWN", "DOCA_ERROR_NOT_PERMITTED", "DOCA_ERROR_IN_USE",
	"DOCA_ERROR_NOT_SUPPORTED", "DOCA_ERROR_AGAIN", "DOCA_ERROR_INVALID_VALUE", "DOCA_ERROR_NO_MEMORY",
	"DOCA_ERROR_INITIALIZATION", "DOCA_ERROR_TIME_OUT", "DOCA_ERROR_SHUTDOWN",
	"DOCA_ERROR_CONNECTION_RESET", "DOCA_ERROR_CONNECTION_ABORTED", "DOCA_ERROR_CONNECTION_INPROGRESS",
	"DOCA_ERROR_NOT_CONNECTED", "DOCA_ERROR_NO_LOCK", "DOCA_ERROR_NOT_FOUND", "DOCA_ERROR_IO_FAILED",
	"DOCA_ERROR_BAD_STATE", "DOCA_ERROR_UNSUPPORTED_VERSION", "DOCA_ERROR_OPERATING_SYSTEM",
	"DOCA_ERROR_DRIVER", "DOCA_ERROR_UNEXPECTED", "DOCA_ERROR_ALREADY_EXIST", "DOCA_ERROR_FULL",
	"DOCA_ERROR_EMPTY", "DOCA_ERROR_IN_PROGRESS", "DOCA_ERROR_TOO_BIG",
};
static const char *const DESCRS[] = {
	"Success", "Unknown error", "Operation not permitted", "Resource already in use",
	"Operation not supported", "Resource temporarily unavailable, try again", "Invalid input",
	"Memory allocation failure", "Resource initialization failure", "Timer expired waiting for resource",
	"Shut down in process or completed", "Connection reset by peer", "Connection aborted",
	"Connection in progress", "Not connected", "Unable to acquire required lock", "Resource not found",
	"Input/Output operation failed", "Bad state", "Unsupported version", "Operating system call failure",
	"DOCA driver call failure", "An unexpected scenario was detected", "Resource already exists",
	"No more space in resource", "No entry is available in resource", "Operation is in progress",
	"Requested operation too big to be contained",
};
#define NCODES ((int)(sizeof(NAMES) / sizeof(NAMES[0])))

API const char *doca_error_get_name(doca_error_t err)
{
	return (err >= 0 && err < NCODES) ? NAMES[err] : "DOCA_ERROR_UNKNOWN";
}

API const char *doca_error_get_descr(doca_error_t err)
{
	return (err >= 0 && err < NCODES) ? DESCRS[err] : "Unknown error";
}

/* ---------------------------------------------------------------- devices */
static struct doca_devinfo the_device = {"0000:03:00.0", NULL};

/* "0000:03:00.0" or "03:00.0" (case-insensitive) against a full address */
static int pci_equal(const char *full, const char *given)
{
	size_t n = strlen(given);
	if (n == 12)
		return strcasecmp(full, given) == 0;
	if (n == 7)
		return strcasecmp(full + 5, given) == 0;
	return 0;
}

API doca_error_t doca_devinfo_create_list(struct doca_devinfo ***dev_list, uint32_t *nb_devs)
{
	if (!dev_list || !nb_devs)
		return DOCA_ERROR_INVALID_VALUE;
	*dev_list = calloc(2, sizeof(**dev_list));
	if (!*dev_list)
		return DOCA_ERROR_NO_MEMORY;
	(*dev_list)[0] = &the_device;
	*nb_devs = 1;
	return DOCA_SUCCESS;
}

API doca_error_t doca_devinfo_destroy_list(struct doca_devinfo **dev_list)
{
	if (!dev_list)
		return DOCA_ERROR_INVALID_VALUE;
	free(dev_list);
	return DOCA_SUCCESS;
}

API doca_error_t doca_devinfo_is_equal_pci_addr(const struct doca_devinfo *devinfo, const char *pci,
						 uint8_t *is_equal)
{
	if (!devinfo || !pci || !is_equal)
		return DOCA_ERROR_INVALID_VALUE;
	*is_equal = (uint8_t)pci_equal(devinfo->pci, pci);
	return DOCA_SUCCESS;
}

API doca_error_t doca_dev_open(struct doca_devinfo *devinfo, struct doca_dev **dev)
{
	if (!devinfo || !dev)
		return DOCA_ERROR_INVALID_VALUE;
	if (!devinfo->opened) {
		devinfo->opened = calloc(1, sizeof(struct doca_dev));
		if (!devinfo->opened)
			return DOCA_ERROR_NO_MEMORY;
		devinfo->opened->info = devinfo;
	}
	devinfo->opened->refs++;
	*dev = devinfo->opened;
	return DOCA_SUCCESS;
}

API doca_error_t doca_dev_close(struct doca_dev *dev)
{
	if (!dev || dev->refs <= 0)
		return DOCA_ERROR_INVALID_VALUE;
	if (--dev->refs == 0) {
		dev->info->opened = NULL;
		free(dev);
	}
	return DOCA_SUCCESS;
}

API struct doca_devinfo *doca_dev_as_devinfo(const struct doca_dev *dev)
{
	return dev ? dev->info : NULL;
}

API doca_error_t doca_devinfo_rep_create_list(struct doca_dev *dev, int filter,
					       struct doca_devinfo_rep ***list, uint32_t *nb)
{
	if (!dev || !list || !nb)
		return DOCA_ERROR_INVALID_VALUE;
	*list = calloc(2, sizeof(**list));
	if (!*list)
		return DOCA_ERROR_NO_MEMORY;
	*nb = 0;
	if (filter == 0 || (filter & REP_FILTER_NET)) {
		struct doca_devinfo_rep *rep = calloc(1, sizeof(*rep));
		if (!rep) {
			free(*list);
			return DOCA_ERROR_NO_MEMORY;
		}
		strcpy(rep->pci, "0000:b1:00.0");
		rep->parent = dev;
		(*list)[(*nb)++] = rep;
	}
	return DOCA_SUCCESS;
}

API doca_error_t doca_devinfo_rep_destroy_list(struct doca_devinfo_rep **list)
{
	if (!list)
		return DOCA_ERROR_INVALID_VALUE;
	for (size_t i = 0; list[i]; i++)
		free(list[i]);
	free(list);
	return DOCA_SUCCESS;
}

API doca_error_t doca_devinfo_rep_is_equal_pci_addr(const struct doca_devinfo_rep *rep, const char *pci,
						     uint8_t *is_equal)
{
	if (!rep || !pci || !is_equal)
		return DOCA_ERROR_INVALID_VALUE;
	*is_equal = (uint8_t)pci_equal(rep->pci, pci);
	return DOCA_SUCCESS;
}

API doca_error_t doca_dev_rep_open(struct doca_devinfo_rep *devinfo, struct doca_dev_rep **dev_rep)
{
	if (!devinfo || !dev_rep)
		return DOCA_ERROR_INVALID_VALUE;
	*dev_rep = calloc(1, sizeof(**dev_rep));
	if (!*dev_rep)
		return DOCA_ERROR_NO_MEMORY;
	(*dev_rep)->info = *devinfo; /* the list may be destroyed after opening */
	return DOCA_SUCCESS;
}

API doca_error_t doca_dev_rep_close(struct doca_dev_rep *dev_rep)
{
	if (!dev_rep)
		return DOCA_ERROR_INVALID_VALUE;
	free(dev_rep);
	return DOCA_SUCCESS;
}

/* ---------------------------------------------------------------- mmap */
#define DESC_MAGIC "DOCASIM1"
struct desc_blob { /* what doca_mmap_export_pci() hands out, packed by hand */
	char magic[8];
	uint32_t pid, perms;
	uint64_t addr, len;
	char pci[16];
};

API doca_error_t doca_mmap_create(struct doca_mmap **mmap)
{
	if (!mmap)
		return DOCA_ERROR_INVALID_VALUE;
	*mmap = calloc(1, sizeof(**mmap));
	if (!*mmap)
		return DOCA_ERROR_NO_MEMORY;
	(*mmap)->perms = ACC_LOCAL_RW;
	(*mmap)->pid = getpid();
	return DOCA_SUCCESS;
}

API doca_error_t doca_mmap_add_dev(struct doca_mmap *mmap, struct doca_dev *dev)
{
	if (!mmap || !dev)
		return DOCA_ERROR_INVALID_VALUE;
	if (mmap->started || mmap->from_export)
		return DOCA_ERROR_NOT_PERMITTED;
	if (mmap->dev)
		return mmap->dev == dev ? DOCA_ERROR_ALREADY_EXIST : DOCA_ERROR_NO_MEMORY;
	mmap->dev = dev;
	return DOCA_SUCCESS;
}

API doca_error_t doca_mmap_set_permissions(struct doca_mmap *mmap, uint32_t access_mask)
{
	if (!mmap || (access_mask & ~0x7fu) || ((access_mask & ACC_PCI_RO) && (access_mask & ACC_PCI_RW)))
		return DOCA_ERROR_INVALID_VALUE;
	if (mmap->started || mmap->from_export)
		return DOCA_ERROR_BAD_STATE;
	mmap->perms = access_mask;
	return DOCA_SUCCESS;
}

API doca_error_t doca_mmap_set_memrange(struct doca_mmap *mmap, void *addr, size_t len)
{
	if (!mmap || !addr || len == 0 || (uintptr_t)addr + len < (uintptr_t)addr)
		return DOCA_ERROR_INVALID_VALUE;
	if (mmap->started || mmap->from_export)
		return DOCA_ERROR_BAD_STATE;
	if (mmap->has_range)
		return DOCA_ERROR_NOT_PERMITTED;
	mmap->addr = (uintptr_t)addr;
	mmap->len = len;
	mmap->has_range = 1;
	return DOCA_SUCCESS;
}

API doca_error_t doca_mmap_start(struct doca_mmap *mmap)
{
	if (!mmap || !mmap->has_range)
		return DOCA_ERROR_INVALID_VALUE;
	if (mmap->from_export || mmap->exported)
		return DOCA_ERROR_NOT_PERMITTED;
	mmap->started = 1;
	return DOCA_SUCCESS;
}

API doca_error_t doca_mmap_export_pci(struct doca_mmap *mmap, const struct doca_dev *dev,
				      const void **export_desc, size_t *export_desc_len)
{
	struct desc_blob blob;
	if (!mmap || !dev || !export_desc || !export_desc_len)
		return DOCA_ERROR_INVALID_VALUE;
	if (mmap->dev != dev)
		return DOCA_ERROR_NOT_FOUND;
	if (!mmap->started || mmap->from_export || !(mmap->perms & (ACC_PCI_RO | ACC_PCI_RW)))
		return DOCA_ERROR_NOT_PERMITTED;
	/* Let another process (the simulated DMA engine) access this memory even under Yama
	 * ptrace_scope=1; harmless where Yama is absent. */
	(void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
	memset(&blob, 0, sizeof(blob));
	memcpy(blob.magic, DESC_MAGIC, 8);
	blob.pid = (uint32_t)mmap->pid;
	blob.perms = mmap->perms;
	blob.addr = mmap->addr;
	blob.len = mmap->len;
	memcpy(blob.pci, dev->info->pci, sizeof(blob.pci));
	memcpy(mmap->desc, &blob, sizeof(blob));
	mmap->exported = 1;
	*export_desc = mmap->desc;
	*export_desc_len = sizeof(blob);
	return DOCA_SUCCESS;
}

API doca_error_t doca_mmap_create_from_export(const union doca_data *user_data, const void *export_desc,
					      size_t export_desc_len, struct doca_dev *dev, struct doca_mmap **mmap)
{
	struct desc_blob blob;
	(void)user_data;
	if (!export_desc || !dev || !mmap || export_desc_len != sizeof(blob))
		return DOCA_ERROR_INVALID_VALUE;
	memcpy(&blob, export_desc, sizeof(blob));
	if (memcmp(blob.magic, DESC_MAGIC, 8) != 0 || blob.len == 0)
		return DOCA_ERROR_INVALID_VALUE;
	*mmap = calloc(1, sizeof(**mmap));
	if (!*mmap)
		return DOCA_ERROR_NO_MEMORY;
	(*mmap)->from_export = 1;
	(*mmap)->started = 1;
	(*mmap)->has_range = 1;
	(*mmap)->pid = (pid_t)blob.pid;
	(*mmap)->perms = blob.perms;
	(*mmap)->addr = blob.addr;
	(*mmap)->len = blob.len;
	(*mmap)->dev = dev;
	return DOCA_SUCCESS;
}

API doca_error_t doca_mmap_destroy(struct doca_mmap *mmap)
{
	if (!mmap)
		return DOCA_ERROR_INVALID_VALUE;
	if (mmap->nbufs > 0)
		return DOCA_ERROR_NOT_PERMITTED;
	free(mmap);
	return DOCA_SUCCESS;
}

/* ---------------------------------------------------------------- buffers */
API doca_error_t doca_buf_inventory_create(size_t num_elements, struct doca_buf_inventory **inventory)
{
	if (!inventory || num_elements == 0)
		return DOCA_ERROR_INVALID_VALUE;
	*inventory = calloc(1, sizeof(**inventory));
	if (!*inventory)
		return DOCA_ERROR_NO_MEMORY;
	(*inventory)->bufs = calloc(num_elements, sizeof(struct doca_buf));
	if (!(*inventory)->bufs) {
		free(*inventory);
		return DOCA_ERROR_NO_MEMORY;
	}
	(*inventory)->n = num_elements;
	return DOCA_SUCCESS;
}

API doca_error_t doca_buf_inventory_start(struct doca_buf_inventory *inventory)
{
	if (!inventory)
		return DOCA_ERROR_INVALID_VALUE;
	inventory->started = 1;
	return DOCA_SUCCESS;
}

API doca_error_t doca_buf_inventory_destroy(struct doca_buf_inventory *inventory)
{
	if (!inventory)
		return DOCA_ERROR_INVALID_VALUE;
	if (inventory->used)
		return DOCA_ERROR_IN_USE;
	free(inventory->bufs);
	free(inventory);
	return DOCA_SUCCESS;
}

API doca_error_t doca_buf_inventory_buf_get_by_args(struct doca_buf_inventory *inventory, struct doca_mmap *mmap,
						    void *addr, size_t len, void *data, size_t data_len,
						    struct doca_buf **buf)
{
	uintptr_t a = (uintptr_t)addr, d = (uintptr_t)data;
	if (!inventory || !mmap || !addr || !buf || len == 0)
		return DOCA_ERROR_INVALID_VALUE;
	if (!inventory->started || !mmap->started)
		return DOCA_ERROR_BAD_STATE;
	if (a < mmap->addr || a + len > mmap->addr + mmap->len || d < a || d + data_len > a + len)
		return DOCA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < inventory->n; i++) {
		struct doca_buf *b = &inventory->bufs[i];
		if (b->refcount)
			continue;
		b->inv = inventory;
		b->mmap = mmap;
		b->head = addr;
		b->len = len;
		b->data = data;
		b->data_len = data_len;
		b->refcount = 1;
		inventory->used++;
		mmap->nbufs++;
		*buf = b;
		return DOCA_SUCCESS;
	}
	return DOCA_ERROR_NO_MEMORY;
}

API doca_error_t doca_buf_set_data(struct doca_buf *buf, void *data, size_t data_len)
{
	if (!buf || !buf->refcount || (char *)data < buf->head ||
	    (char *)data + data_len > buf->head + buf->len)
		return DOCA_ERROR_INVALID_VALUE;
	buf->data = data;
	buf->data_len = data_len;
	return DOCA_SUCCESS;
}

API doca_error_t doca_buf_dec_refcount(struct doca_buf *buf, uint16_t *refcount)
{
	if (!buf)
		return DOCA_ERROR_INVALID_VALUE;
	if (buf->refcount == 0)
		return DOCA_ERROR_BAD_STATE;
	if (--buf->refcount == 0) {
		buf->inv->used--;
		buf->mmap->nbufs--;
	}
	if (refcount)
		*refcount = buf->refcount;
	return DOCA_SUCCESS;
}

/* ---------------------------------------------------------------- progress engine, contexts, tasks */
API doca_error_t doca_pe_create(struct doca_pe **pe)
{
	if (!pe)
		return DOCA_ERROR_INVALID_VALUE;
	*pe = calloc(1, sizeof(**pe));
	return *pe ? DOCA_SUCCESS : DOCA_ERROR_NO_MEMORY;
}

API doca_error_t doca_pe_destroy(struct doca_pe *pe)
{
	if (!pe)
		return DOCA_ERROR_INVALID_VALUE;
	if (pe->nctx)
		return DOCA_ERROR_IN_USE;
	free(pe);
	return DOCA_SUCCESS;
}

API doca_error_t doca_pe_connect_ctx(struct doca_pe *pe, struct doca_ctx *ctx)
{
	if (!pe || !ctx)
		return DOCA_ERROR_INVALID_VALUE;
	if (ctx->state != CTX_IDLE)
		return DOCA_ERROR_BAD_STATE;
	if (ctx->pe)
		return DOCA_ERROR_NOT_PERMITTED;
	if (pe->nctx == SIM_MAX_CTX)
		return DOCA_ERROR_NO_MEMORY;
	pe->ctxs[pe->nctx++] = ctx;
	ctx->pe = pe;
	return DOCA_SUCCESS;
}

API void sim_pe_detach(struct doca_ctx *ctx)
{
	struct doca_pe *pe = ctx->pe;
	if (!pe)
		return;
	for (int i = 0; i < pe->nctx; i++)
		if (pe->ctxs[i] == ctx) {
			pe->ctxs[i] = pe->ctxs[--pe->nctx];
			break;
		}
	ctx->pe = NULL;
}

API uint8_t doca_pe_progress(struct doca_pe *pe)
{
	int made = 0;
	if (!pe)
		return 0;
	for (int i = 0; i < pe->nctx; i++)
		made += pe->ctxs[i]->ops->progress(pe->ctxs[i]);
	return made > 0;
}

API doca_error_t doca_ctx_start(struct doca_ctx *ctx)
{
	if (!ctx)
		return DOCA_ERROR_INVALID_VALUE;
	if (!ctx->pe || ctx->state != CTX_IDLE)
		return DOCA_ERROR_BAD_STATE;
	return ctx->ops->start(ctx);
}

API doca_error_t doca_ctx_stop(struct doca_ctx *ctx)
{
	if (!ctx)
		return DOCA_ERROR_INVALID_VALUE;
	if (ctx->state == CTX_IDLE)
		return DOCA_ERROR_BAD_STATE;
	if (ctx->state == CTX_STOPPING)
		return DOCA_ERROR_IN_PROGRESS;
	return ctx->ops->stop(ctx);
}

API doca_error_t doca_ctx_get_state(const struct doca_ctx *ctx, int *state)
{
	if (!ctx || !state)
		return DOCA_ERROR_INVALID_VALUE;
	*state = ctx->state;
	return DOCA_SUCCESS;
}

API doca_error_t doca_task_submit(struct doca_task *task)
{
	if (!task || !task->allocated || task->submitted)
		return DOCA_ERROR_INVALID_VALUE;
	if (task->ctx->state != CTX_RUNNING)
		return DOCA_ERROR_BAD_STATE;
	return task->ctx->ops->submit(task);
}

API void doca_task_free(struct doca_task *task)
{
	if (task && task->allocated && !task->submitted)
		task->ctx->ops->task_free(task);
}

API doca_error_t doca_task_get_status(const struct doca_task *task)
{
	return task ? task->status : DOCA_ERROR_INVALID_VALUE;
}

#endif /* SIM_COMMON */

/* ================================================================== libdoca_dma */
#ifdef SIM_DMA

struct doca_dma_task_memcpy;
typedef void (*memcpy_cb_t)(struct doca_dma_task_memcpy *, union doca_data, union doca_data);

struct doca_dma_task_memcpy {
	struct doca_task task; /* first: doca_task <-> memcpy task */
	struct doca_buf *src, *dst;
	union doca_data user_data;
};
struct doca_dma {
	struct doca_ctx ctx; /* first: doca_ctx <-> dma */
	struct doca_dev *dev;
	memcpy_cb_t done_cb, err_cb;
	uint32_t ntasks;
	struct doca_dma_task_memcpy *tasks;
	struct doca_task *queue_head, *queue_tail; /* submitted, not yet executed */
};

static uint64_t max_buf_size(void)
{
	const char *env = getenv("DOCA_SIM_MAX_BUF_SIZE");
	uint64_t v = env ? strtoull(env, NULL, 10) : 0;
	return v ? v : (1u << 20);
}

API doca_error_t doca_dma_cap_task_memcpy_is_supported(const struct doca_devinfo *devinfo)
{
	return devinfo ? DOCA_SUCCESS : DOCA_ERROR_INVALID_VALUE;
}

API doca_error_t doca_dma_cap_task_memcpy_get_max_buf_size(const struct doca_devinfo *devinfo, uint64_t *size)
{
	if (!devinfo || !size)
		return DOCA_ERROR_INVALID_VALUE;
	*size = max_buf_size();
	return DOCA_SUCCESS;
}

/* what the DMA engine does: move bytes between this process and the mmap owners */
static doca_error_t dma_copy(struct doca_buf *src, struct doca_buf *dst)
{
	struct doca_mmap *sm = src->mmap, *dm = dst->mmap;
	char *from = src->data, *to = dst->data + dst->data_len;
	size_t n = src->data_len;
	ssize_t got;
	int remote_src = sm->pid != getpid(), remote_dst = dm->pid != getpid();
	if (sm->from_export && !(sm->perms & (ACC_PCI_RO | ACC_PCI_RW)))
		return DOCA_ERROR_NOT_PERMITTED;
	if (dm->from_export && !(dm->perms & ACC_PCI_RW))
		return DOCA_ERROR_NOT_PERMITTED;
	if (to + n > dst->head + dst->len)
		return DOCA_ERROR_INVALID_VALUE;
	if (!remote_src && !remote_dst) {
		memmove(to, from, n);
	} else if (remote_src && !remote_dst) {
		struct iovec l = {to, n}, r = {from, n};
		got = process_vm_readv(sm->pid, &l, 1, &r, 1, 0);
		if (got != (ssize_t)n)
			goto fail;
	} else if (!remote_src && remote_dst) {
		struct iovec l = {from, n}, r = {to, n};
		got = process_vm_writev(dm->pid, &l, 1, &r, 1, 0);
		if (got != (ssize_t)n)
			goto fail;
	} else {
		char *bounce = malloc(n ? n : 1);
		struct iovec l = {bounce, n}, r1 = {from, n}, r2 = {to, n};
		if (!bounce)
			return DOCA_ERROR_NO_MEMORY;
		got = process_vm_readv(sm->pid, &l, 1, &r1, 1, 0);
		if (got == (ssize_t)n)
			got = process_vm_writev(dm->pid, &l, 1, &r2, 1, 0);
		free(bounce);
		if (got != (ssize_t)n)
			goto fail;
	}
	dst->data_len += n;
	return DOCA_SUCCESS;
fail:
	if (errno == ESRCH)
		return DOCA_ERROR_NOT_CONNECTED; /* the other side is gone */
	if (errno == EPERM)
		return DOCA_ERROR_NOT_PERMITTED;
	return DOCA_ERROR_IO_FAILED;
}

static doca_error_t dma_start(struct doca_ctx *ctx)
{
	struct doca_dma *dma = (struct doca_dma *)ctx;
	if (!dma->ntasks || !dma->done_cb || !dma->err_cb)
		return DOCA_ERROR_BAD_STATE; /* memcpy task conf missing */
	ctx->state = CTX_RUNNING;
	return DOCA_SUCCESS;
}

static doca_error_t dma_stop(struct doca_ctx *ctx)
{
	struct doca_dma *dma = (struct doca_dma *)ctx;
	if (dma->queue_head) {
		ctx->state = CTX_STOPPING; /* flushed by the next progress */
		return DOCA_ERROR_IN_PROGRESS;
	}
	ctx->state = CTX_IDLE;
	return DOCA_SUCCESS;
}

static int dma_progress(struct doca_ctx *ctx)
{
	struct doca_dma *dma = (struct doca_dma *)ctx;
	int made = 0;
	while (dma->queue_head) {
		struct doca_dma_task_memcpy *t = (struct doca_dma_task_memcpy *)dma->queue_head;
		dma->queue_head = t->task.next;
		if (!dma->queue_head)
			dma->queue_tail = NULL;
		t->task.submitted = 0;
		t->task.status = ctx->state == CTX_STOPPING ? DOCA_ERROR_SHUTDOWN : dma_copy(t->src, t->dst);
		(t->task.status == DOCA_SUCCESS ? dma->done_cb : dma->err_cb)(t, t->user_data, ctx->user_data);
		made++;
	}
	if (ctx->state == CTX_STOPPING) {
		ctx->state = CTX_IDLE;
		made++;
	}
	return made;
}

static doca_error_t dma_submit(struct doca_task *task)
{
	struct doca_dma *dma = (struct doca_dma *)task->ctx;
	struct doca_dma_task_memcpy *t = (struct doca_dma_task_memcpy *)task;
	if (!t->src || !t->dst || t->src->data_len > max_buf_size())
		return DOCA_ERROR_INVALID_VALUE;
	task->submitted = 1;
	task->next = NULL;
	if (dma->queue_tail)
		dma->queue_tail->next = task;
	else
		dma->queue_head = task;
	dma->queue_tail = task;
	return DOCA_SUCCESS;
}

static void dma_task_free(struct doca_task *task)
{
	task->allocated = 0;
}

static const struct sim_ctx_ops DMA_OPS = {dma_start, dma_stop, dma_progress, dma_submit, dma_task_free};

API doca_error_t doca_dma_create(struct doca_dev *dev, struct doca_dma **dma)
{
	if (!dev || !dma)
		return DOCA_ERROR_INVALID_VALUE;
	*dma = calloc(1, sizeof(**dma));
	if (!*dma)
		return DOCA_ERROR_NO_MEMORY;
	(*dma)->ctx.ops = &DMA_OPS;
	(*dma)->dev = dev;
	return DOCA_SUCCESS;
}

API struct doca_ctx *doca_dma_as_ctx(struct doca_dma *dma)
{
	return dma ? &dma->ctx : NULL;
}

API doca_error_t doca_dma_task_memcpy_set_conf(struct doca_dma *dma, memcpy_cb_t done_cb, memcpy_cb_t err_cb,
					       uint32_t num_tasks)
{
	if (!dma || !done_cb || !err_cb || num_tasks == 0)
		return DOCA_ERROR_INVALID_VALUE;
	if (dma->ctx.state != CTX_IDLE)
		return DOCA_ERROR_BAD_STATE;
	free(dma->tasks);
	dma->tasks = calloc(num_tasks, sizeof(*dma->tasks));
	if (!dma->tasks)
		return DOCA_ERROR_NO_MEMORY;
	dma->ntasks = num_tasks;
	dma->done_cb = done_cb;
	dma->err_cb = err_cb;
	return DOCA_SUCCESS;
}

API doca_error_t doca_dma_task_memcpy_alloc_init(struct doca_dma *dma, const struct doca_buf *src,
						 struct doca_buf *dst, union doca_data user_data,
						 struct doca_dma_task_memcpy **task)
{
	if (!dma || !src || !dst || !task)
		return DOCA_ERROR_INVALID_VALUE;
	if (dma->ctx.state != CTX_RUNNING)
		return DOCA_ERROR_BAD_STATE;
	for (uint32_t i = 0; i < dma->ntasks; i++) {
		struct doca_dma_task_memcpy *t = &dma->tasks[i];
		if (t->task.allocated)
			continue;
		memset(t, 0, sizeof(*t));
		t->task.ctx = &dma->ctx;
		t->task.allocated = 1;
		t->src = (struct doca_buf *)src;
		t->dst = dst;
		t->user_data = user_data;
		*task = t;
		return DOCA_SUCCESS;
	}
	return DOCA_ERROR_NO_MEMORY;
}

API struct doca_task *doca_dma_task_memcpy_as_task(struct doca_dma_task_memcpy *task)
{
	return task ? &task->task : NULL;
}

API doca_error_t doca_dma_destroy(struct doca_dma *dma)
{
	if (!dma)
		return DOCA_ERROR_INVALID_VALUE;
	if (dma->ctx.state != CTX_IDLE)
		return DOCA_ERROR_BAD_STATE;
	for (uint32_t i = 0; i < dma->ntasks; i++)
		if (dma->tasks[i].task.allocated)
			return DOCA_ERROR_IN_USE;
	sim_pe_detach(&dma->ctx);
	free(dma->tasks);
	free(dma);
	return DOCA_SUCCESS;
}

#endif /* SIM_DMA */

/* ================================================================== libdoca_comch */
#ifdef SIM_COMCH

#define COMCH_MAX_MSG 4080u
#define COMCH_MAX_CONNS 8
#define COMCH_RECV_BURST 32

struct doca_comch_task_send;
struct doca_comch_connection;
typedef void (*send_cb_t)(struct doca_comch_task_send *, union doca_data, union doca_data);
typedef void (*recv_cb_t)(void *event, uint8_t *buf, uint32_t len, struct doca_comch_connection *conn);
typedef void (*conn_cb_t)(void *event, struct doca_comch_connection *conn, uint8_t ok);

struct doca_comch_connection {
	int fd;    /* -1 once closed */
	int alive; /* peer still there */
	struct sim_comch *owner;
};
struct doca_comch_task_send {
	struct doca_task task; /* first */
	struct doca_comch_connection *peer;
	uint8_t *msg;
	uint32_t len;
};
struct sim_comch { /* shared by server and client; doca_comch_server/client point at one */
	struct doca_ctx ctx; /* first */
	int is_server;
	struct doca_dev *dev;
	char name[108];
	uint32_t max_msg, rq_size;
	send_cb_t done_cb, err_cb;
	uint32_t ntasks;
	struct doca_comch_task_send *tasks;
	recv_cb_t recv_cb;
	conn_cb_t conn_cb, disc_cb;
	int lfd; /* server: listening socket */
	struct doca_comch_connection *conns[COMCH_MAX_CONNS]; /* server: accepted; client: [0] */
	int nconns;
	struct doca_task *done_head, *done_tail; /* send completions to deliver */
	uint8_t *rbuf;
};
struct doca_comch_server {
	struct sim_comch ep;
};
struct doca_comch_client {
	struct sim_comch ep;
};
static char dummy_event; /* event objects are opaque and unused by callers */

static socklen_t service_addr(const char *name, struct sockaddr_un *addr)
{
	memset(addr, 0, sizeof(*addr));
	addr->sun_family = AF_UNIX;
	/* abstract namespace: leading NUL, no file on disk */
	int n = snprintf(addr->sun_path + 1, sizeof(addr->sun_path) - 1, "doca-sim-comch/%s", name);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

static void conn_close(struct doca_comch_connection *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->alive = 0;
}

static struct doca_comch_connection *conn_new(struct sim_comch *ep, int fd)
{
	struct doca_comch_connection *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->fd = fd;
	c->alive = 1;
	c->owner = ep;
	return c;
}

static void peer_lost(struct sim_comch *ep, struct doca_comch_connection *c)
{
	conn_close(c);
	if (ep->is_server) {
		if (ep->disc_cb)
			ep->disc_cb(&dummy_event, c, 1);
	} else {
		ep->ctx.state = CTX_IDLE; /* the client context cannot run without its server */
	}
}

static void push_done(struct sim_comch *ep, struct doca_task *task)
{
	task->next = NULL;
	if (ep->done_tail)
		ep->done_tail->next = task;
	else
		ep->done_head = task;
	ep->done_tail = task;
}

static int deliver_done(struct sim_comch *ep)
{
	int made = 0;
	while (ep->done_head) {
		struct doca_comch_task_send *t = (struct doca_comch_task_send *)ep->done_head;
		ep->done_head = t->task.next;
		if (!ep->done_head)
			ep->done_tail = NULL;
		t->task.submitted = 0;
		(t->task.status == DOCA_SUCCESS ? ep->done_cb : ep->err_cb)(t, (union doca_data){0}, ep->ctx.user_data);
		made++;
	}
	return made;
}

static doca_error_t comch_start(struct doca_ctx *ctx)
{
	struct sim_comch *ep = (struct sim_comch *)ctx;
	struct sockaddr_un addr;
	socklen_t alen = service_addr(ep->name, &addr);
	if (!ep->ntasks || !ep->done_cb || !ep->recv_cb || (ep->is_server && !ep->conn_cb))
		return DOCA_ERROR_BAD_STATE; /* configuration incomplete */
	ep->rbuf = malloc(ep->max_msg + 1);
	if (!ep->rbuf)
		return DOCA_ERROR_NO_MEMORY;
	if (!ep->is_server) {
		ctx->state = CTX_STARTING; /* connects from doca_pe_progress() */
		return DOCA_ERROR_IN_PROGRESS;
	}
	ep->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (ep->lfd < 0)
		return DOCA_ERROR_OPERATING_SYSTEM;
	if (bind(ep->lfd, (struct sockaddr *)&addr, alen) != 0 || listen(ep->lfd, 8) != 0) {
		int err = errno;
		close(ep->lfd);
		ep->lfd = -1;
		return err == EADDRINUSE ? DOCA_ERROR_ALREADY_EXIST : DOCA_ERROR_OPERATING_SYSTEM;
	}
	ctx->state = CTX_RUNNING;
	return DOCA_SUCCESS;
}

static doca_error_t comch_stop(struct doca_ctx *ctx)
{
	struct sim_comch *ep = (struct sim_comch *)ctx;
	for (int i = 0; i < ep->nconns; i++)
		conn_close(ep->conns[i]);
	if (ep->lfd >= 0)
		close(ep->lfd);
	ep->lfd = -1;
	ctx->state = CTX_STOPPING; /* becomes idle on the next progress */
	return DOCA_ERROR_IN_PROGRESS;
}

static int client_try_connect(struct sim_comch *ep)
{
	struct sockaddr_un addr;
	socklen_t alen = service_addr(ep->name, &addr);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	if (connect(fd, (struct sockaddr *)&addr, alen) != 0) { /* no server yet: retry later */
		close(fd);
		return 0;
	}
	ep->conns[0] = conn_new(ep, fd);
	if (!ep->conns[0]) {
		close(fd);
		return 0;
	}
	ep->nconns = 1;
	ep->ctx.state = CTX_RUNNING;
	return 1;
}

static int comch_progress(struct doca_ctx *ctx)
{
	struct sim_comch *ep = (struct sim_comch *)ctx;
	int made = 0;
	if (ctx->state == CTX_STARTING)
		return client_try_connect(ep);
	if (ctx->state == CTX_STOPPING) {
		made = deliver_done(ep);
		ctx->state = CTX_IDLE;
		return made + 1;
	}
	if (ctx->state != CTX_RUNNING)
		return deliver_done(ep);
	if (ep->is_server) { /* new clients */
		int fd;
		while ((fd = accept4(ep->lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
			struct doca_comch_connection *c = ep->nconns < COMCH_MAX_CONNS ? conn_new(ep, fd) : NULL;
			if (!c) {
				close(fd);
				continue;
			}
			ep->conns[ep->nconns++] = c;
			ep->conn_cb(&dummy_event, c, 1);
			made++;
		}
	}
	for (int i = 0; i < ep->nconns && ctx->state == CTX_RUNNING; i++) {
		struct doca_comch_connection *c = ep->conns[i];
		for (int k = 0; k < COMCH_RECV_BURST && c->alive; k++) {
			ssize_t n = recv(c->fd, ep->rbuf, ep->max_msg + 1, MSG_DONTWAIT);
			if (n > 0) {
				ep->recv_cb(&dummy_event, ep->rbuf, (uint32_t)n, c);
				made++;
			} else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
				peer_lost(ep, c);
				made++;
			} else {
				break;
			}
		}
	}
	return made + deliver_done(ep);
}

static doca_error_t comch_submit(struct doca_task *task)
{
	struct sim_comch *ep = (struct sim_comch *)task->ctx;
	struct doca_comch_task_send *t = (struct doca_comch_task_send *)task;
	if (!t->peer->alive)
		return DOCA_ERROR_NOT_CONNECTED;
	ssize_t n = send(t->peer->fd, t->msg, t->len, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return DOCA_ERROR_AGAIN; /* peer's receive queue is full: progress and retry */
	task->status = n == (ssize_t)t->len ? DOCA_SUCCESS : DOCA_ERROR_CONNECTION_RESET;
	task->submitted = 1;
	push_done(ep, task);
	return DOCA_SUCCESS;
}

static void comch_task_free(struct doca_task *task)
{
	struct doca_comch_task_send *t = (struct doca_comch_task_send *)task;
	free(t->msg);
	t->msg = NULL;
	task->allocated = 0;
}

static const struct sim_ctx_ops COMCH_OPS = {comch_start, comch_stop, comch_progress, comch_submit,
					     comch_task_free};

static doca_error_t ep_create(struct doca_dev *dev, const char *name, int is_server, struct sim_comch **out)
{
	if (!dev || !name || !out || !name[0] || strlen(name) > 80)
		return DOCA_ERROR_INVALID_VALUE;
	struct sim_comch *ep = calloc(1, sizeof(struct doca_comch_server));
	if (!ep)
		return DOCA_ERROR_NO_MEMORY;
	ep->ctx.ops = &COMCH_OPS;
	ep->is_server = is_server;
	ep->dev = dev;
	strcpy(ep->name, name);
	ep->max_msg = COMCH_MAX_MSG;
	ep->rq_size = 64;
	ep->lfd = -1;
	*out = ep;
	return DOCA_SUCCESS;
}

static doca_error_t ep_destroy(struct sim_comch *ep)
{
	if (!ep)
		return DOCA_ERROR_INVALID_VALUE;
	if (ep->ctx.state != CTX_IDLE)
		return DOCA_ERROR_BAD_STATE;
	for (uint32_t i = 0; i < ep->ntasks; i++)
		if (ep->tasks[i].task.allocated)
			return DOCA_ERROR_IN_USE;
	sim_pe_detach(&ep->ctx);
	for (int i = 0; i < ep->nconns; i++) {
		conn_close(ep->conns[i]);
		free(ep->conns[i]);
	}
	free(ep->tasks);
	free(ep->rbuf);
	free(ep);
	return DOCA_SUCCESS;
}

static doca_error_t ep_set_max_msg(struct sim_comch *ep, uint32_t size)
{
	if (!ep || size == 0 || size > COMCH_MAX_MSG)
		return DOCA_ERROR_INVALID_VALUE;
	if (ep->ctx.state != CTX_IDLE)
		return DOCA_ERROR_BAD_STATE;
	ep->max_msg = size;
	return DOCA_SUCCESS;
}

static doca_error_t ep_set_rq(struct sim_comch *ep, uint32_t size)
{
	if (!ep || size == 0 || size > 8192)
		return DOCA_ERROR_INVALID_VALUE;
	if (ep->ctx.state != CTX_IDLE)
		return DOCA_ERROR_BAD_STATE;
	ep->rq_size = size;
	return DOCA_SUCCESS;
}

static doca_error_t ep_send_conf(struct sim_comch *ep, send_cb_t done_cb, send_cb_t err_cb, uint32_t n)
{
	if (!ep || !done_cb || !err_cb || n == 0)
		return DOCA_ERROR_INVALID_VALUE;
	if (ep->ctx.state != CTX_IDLE)
		return DOCA_ERROR_BAD_STATE;
	free(ep->tasks);
	ep->tasks = calloc(n, sizeof(*ep->tasks));
	if (!ep->tasks)
		return DOCA_ERROR_NO_MEMORY;
	ep->ntasks = n;
	ep->done_cb = done_cb;
	ep->err_cb = err_cb;
	return DOCA_SUCCESS;
}

static doca_error_t ep_send_alloc(struct sim_comch *ep, struct doca_comch_connection *peer, const void *msg,
				  uint32_t len, struct doca_comch_task_send **task)
{
	if (!ep || !peer || !msg || !task || len == 0 || len > ep->max_msg || peer->owner != ep)
		return DOCA_ERROR_INVALID_VALUE;
	for (uint32_t i = 0; i < ep->ntasks; i++) {
		struct doca_comch_task_send *t = &ep->tasks[i];
		if (t->task.allocated)
			continue;
		memset(t, 0, sizeof(*t));
		t->msg = malloc(len);
		if (!t->msg)
			return DOCA_ERROR_NO_MEMORY;
		memcpy(t->msg, msg, len);
		t->len = len;
		t->peer = peer;
		t->task.ctx = &ep->ctx;
		t->task.allocated = 1;
		*task = t;
		return DOCA_SUCCESS;
	}
	return DOCA_ERROR_NO_MEMORY;
}

API doca_error_t doca_comch_cap_get_max_msg_size(const struct doca_devinfo *devinfo, uint32_t *size)
{
	if (!devinfo || !size)
		return DOCA_ERROR_INVALID_VALUE;
	*size = COMCH_MAX_MSG;
	return DOCA_SUCCESS;
}

API doca_error_t doca_comch_cap_server_is_supported(const struct doca_devinfo *devinfo)
{
	return devinfo ? DOCA_SUCCESS : DOCA_ERROR_INVALID_VALUE;
}

API doca_error_t doca_comch_cap_client_is_supported(const struct doca_devinfo *devinfo)
{
	return devinfo ? DOCA_SUCCESS : DOCA_ERROR_INVALID_VALUE;
}

API doca_error_t doca_comch_server_create(struct doca_dev *dev, struct doca_dev_rep *repr, const char *name,
					  struct doca_comch_server **server)
{
	if (!repr)
		return DOCA_ERROR_INVALID_VALUE;
	return ep_create(dev, name, 1, (struct sim_comch **)server);
}

API doca_error_t doca_comch_client_create(struct doca_dev *dev, const char *name, struct doca_comch_client **client)
{
	return ep_create(dev, name, 0, (struct sim_comch **)client);
}

API doca_error_t doca_comch_server_destroy(struct doca_comch_server *s) { return ep_destroy(&s->ep); }
API doca_error_t doca_comch_client_destroy(struct doca_comch_client *c) { return ep_destroy(&c->ep); }
API doca_error_t doca_comch_server_set_max_msg_size(struct doca_comch_server *s, uint32_t v) { return ep_set_max_msg(&s->ep, v); }
API doca_error_t doca_comch_client_set_max_msg_size(struct doca_comch_client *c, uint32_t v) { return ep_set_max_msg(&c->ep, v); }
API doca_error_t doca_comch_server_set_recv_queue_size(struct doca_comch_server *s, uint32_t v) { return ep_set_rq(&s->ep, v); }
API doca_error_t doca_comch_client_set_recv_queue_size(struct doca_comch_client *c, uint32_t v) { return ep_set_rq(&c->ep, v); }
API struct doca_ctx *doca_comch_server_as_ctx(struct doca_comch_server *s) { return s ? &s->ep.ctx : NULL; }
API struct doca_ctx *doca_comch_client_as_ctx(struct doca_comch_client *c) { return c ? &c->ep.ctx : NULL; }

API doca_error_t doca_comch_server_task_send_set_conf(struct doca_comch_server *s, send_cb_t done_cb,
						      send_cb_t err_cb, uint32_t n)
{
	return s ? ep_send_conf(&s->ep, done_cb, err_cb, n) : DOCA_ERROR_INVALID_VALUE;
}

API doca_error_t doca_comch_client_task_send_set_conf(struct doca_comch_client *c, send_cb_t done_cb,
						      send_cb_t err_cb, uint32_t n)
{
	return c ? ep_send_conf(&c->ep, done_cb, err_cb, n) : DOCA_ERROR_INVALID_VALUE;
}

static doca_error_t ep_recv_register(struct sim_comch *ep, recv_cb_t cb)
{
	if (!cb)
		return DOCA_ERROR_INVALID_VALUE;
	if (ep->ctx.state != CTX_IDLE)
		return DOCA_ERROR_BAD_STATE;
	ep->recv_cb = cb;
	return DOCA_SUCCESS;
}

API doca_error_t doca_comch_server_event_msg_recv_register(struct doca_comch_server *s, recv_cb_t cb)
{
	return s ? ep_recv_register(&s->ep, cb) : DOCA_ERROR_INVALID_VALUE;
}

API doca_error_t doca_comch_client_event_msg_recv_register(struct doca_comch_client *c, recv_cb_t cb)
{
	return c ? ep_recv_register(&c->ep, cb) : DOCA_ERROR_INVALID_VALUE;
}

API doca_error_t doca_comch_server_event_connection_status_changed_register(struct doca_comch_server *s,
									     conn_cb_t connect_cb,
									     conn_cb_t disconnect_cb)
{
	if (!s || !connect_cb || !disconnect_cb)
		return DOCA_ERROR_INVALID_VALUE;
	if (s->ep.ctx.state != CTX_IDLE)
		return DOCA_ERROR_BAD_STATE;
	s->ep.conn_cb = connect_cb;
	s->ep.disc_cb = disconnect_cb;
	return DOCA_SUCCESS;
}

API doca_error_t doca_comch_server_disconnect(struct doca_comch_server *s, struct doca_comch_connection *c)
{
	if (!s || !c || c->owner != &s->ep)
		return DOCA_ERROR_INVALID_VALUE;
	conn_close(c);
	return DOCA_SUCCESS;
}

API doca_error_t doca_comch_client_get_connection(const struct doca_comch_client *c,
						  struct doca_comch_connection **conn)
{
	if (!c || !conn)
		return DOCA_ERROR_INVALID_VALUE;
	if (c->ep.ctx.state != CTX_RUNNING || !c->ep.nconns)
		return DOCA_ERROR_BAD_STATE;
	*conn = c->ep.conns[0];
	return DOCA_SUCCESS;
}

API doca_error_t doca_comch_server_task_send_alloc_init(struct doca_comch_server *s,
							struct doca_comch_connection *peer, const void *msg,
							uint32_t len, struct doca_comch_task_send **task)
{
	return s ? ep_send_alloc(&s->ep, peer, msg, len, task) : DOCA_ERROR_INVALID_VALUE;
}

API doca_error_t doca_comch_client_task_send_alloc_init(struct doca_comch_client *c,
							struct doca_comch_connection *peer, const void *msg,
							uint32_t len, struct doca_comch_task_send **task)
{
	return c ? ep_send_alloc(&c->ep, peer, msg, len, task) : DOCA_ERROR_INVALID_VALUE;
}

API struct doca_task *doca_comch_task_send_as_task(struct doca_comch_task_send *task)
{
	return task ? &task->task : NULL;
}

#endif /* SIM_COMCH */
