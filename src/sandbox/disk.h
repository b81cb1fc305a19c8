/* disk: the workspace's own file system, so a sandbox's files cannot take
 * the host's disk.
 *
 * Kernels built without ext4's quota format (CONFIG_QFMT_V2, as here)
 * have no user or project quotas, and tmpfs pages would be charged to the
 * sandbox's memory, so a sandbox that create makes its workspace for gets
 * a file system of its own: a sparse ext4 image (no journal) of --disk
 * bytes in its state directory, copied from a template of that size,
 * loop-mounted (autoclear, buffered, discard) at SG_DISK_DIR/<uid>. The
 * mount point is keyed by the sandbox's own uid (state.h: claimed
 * host-wide, one sandbox at a time), outside every state directory: an
 * `rm -rf` of a state directory never walks into a live mount, and a
 * mount left by a sandbox whose state directory vanished is detached by
 * gc --orphan-cgroups or when its uid slot is claimed again. ENOSPC is the learner's
 * alone; the space on the host is at most the image's size, and the
 * learner's deletions are punched out of the image (discard).
 *
 * Root keeps a reserve of 1/16 above the learner's bytes (ext4's reserved
 * blocks), so a rollback (the checkpoint worker, as root) never fails
 * because the learner filled the disk. */
#ifndef SG_SANDBOX_DISK_H
#define SG_SANDBOX_DISK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"
#include "state/state.h"

#define SG_DISK_DIR "/run/sandglass-disk"
#define SG_DISK_DEFAULT (1ull << 30)  /* --disk when not given */
#define SG_DISK_MIN (16ull << 20)     /* ext4 with room to spare for its metadata */
/* Its image (tables and root's reserve on top, ~1.11x) stays under ext4's
 * 16 TiB file limit (4 KiB blocks): a size create cannot make is refused. */
#define SG_DISK_MAX (14ull << 40)
#define SG_DISK_IMAGE "disk.img"      /* in <state>/sb/<id>/ */
/* SG_DISK_DIR/.template-v<N>-<bytes>: a formatted image per size, copied
 * by each create; a new N when mkfs's options change. */
#define SG_DISK_TEMPLATE_VERSION 1

/* The bounds on a sandbox's loop device (SECURITY.md, "Disk bandwidth"):
 * at most SG_DISK_DIRTY_MAX of its pages dirty at once (its bdi's
 * max_bytes with strict_limit, which holds even while the host's dirty
 * memory is far under its own thresholds), so the learner's writers wait
 * in their own context and a bounded amount of writeback is ever queued
 * ahead of the host's fsyncs; its writes at most SG_DISK_WRITE_BPS on
 * cgroup v2 with the io controller (io.max in sandglass/: cgroup
 * writeback charges them to the learner); and on every host, the loop
 * device in direct I/O with a short queue (sg_disk_loop_queue), which on
 * cgroup v1 is the only bound on its share of the host's disk (v1 blkio
 * charges writeback to its root, a cgroup sandglass does not touch). */
#define SG_DISK_DIRTY_MAX (32ull << 20) /* SANDGLASS_DISK_DIRTY_MIB; 0: none */
#define SG_DISK_WRITE_BPS (32ull << 20) /* SANDGLASS_DISK_WRITE_MIBS (MiB/s); 0: none */
#define SG_DISK_QUEUE_REQS 4  /* nr_requests (the block layer's least): 4 x 16 KiB in flight */
#define SG_DISK_QUEUE_KIB 16  /* max_sectors_kb (64 KiB: the host's fsync p99 0.44x, not 0.15x) */
#define SG_DISK_LOOP_MAJOR 7

/* --disk SIZE: a size (K, M, G, T) from SG_DISK_MIN (16M) to SG_DISK_MAX (14T). */
int sg_disk_parse(const char *s, uint64_t *bytes, sg_err *err);

/* Whether the state directory's file system has room for the image of a
 * --disk of bytes to grow to its full size, beside what the images of the
 * state directory's other sandboxes may still grow by (their size less
 * what they hold). -1 with ENOSPC saying the figures when not: create
 * refuses then unless --overcommit. A bound at create, not a reservation
 * (two creates at once each see the space before the other's image). */
int sg_disk_room(uint64_t bytes, sg_err *err);

/* Makes the file system: image (created, must not exist) of bytes for the
 * learner, its root owned by uid:gid, mounted at SG_DISK_DIR/<uid>, whose
 * path goes to *mnt (caller frees). On failure nothing is left (no image,
 * loop device or mount) and err says why: create fails when --disk was
 * given, else falls back to a directory and says so. */
int sg_disk_make(const char *image, uint64_t bytes, uid_t uid, gid_t gid, char **mnt, sg_err *err);

/* The bounds above on the block device dev (a sandbox's loop device):
 * at most dirty bytes of its pages dirty (0: the kernel's default) and
 * bps bytes/s of writes (0: no rate); both 0 takes every bound away (the
 * device is reused). A knob this host lacks is skipped; -1 when one it
 * has refuses. */
int sg_disk_io_limit(dev_t dev, uint64_t dirty, uint64_t bps, sg_err *err);
/* SG_DISK_WRITE_BPS, or SANDGLASS_DISK_WRITE_MIBS (MiB/s) when set. */
uint64_t sg_disk_write_bps(void);
/* SG_DISK_DIRTY_MAX, or SANDGLASS_DISK_DIRTY_MIB (MiB) when set. */
uint64_t sg_disk_dirty_max(void);

/* The loop device's share of the host disk's queue (SECURITY.md, "Disk
 * bandwidth"), on (at create, once the file system is mounted: its
 * metadata was read from the page cache; create runs it in a detached
 * process, since each change freezes the queue): direct I/O (lfd, the
 * loop device's fd) and a queue of SG_DISK_QUEUE_REQS requests of at most
 * SG_DISK_QUEUE_KIB; off (destroy, lfd -1; the device is reused): the
 * loop driver's defaults. -1 when a knob refuses. */
int sg_disk_loop_queue(int lfd, dev_t dev, bool on, sg_err *err);
/* false when SANDGLASS_DISK_DIRECT=0 (the loop device left buffered with
 * its default queue, for a comparison). */
bool sg_disk_queue_on(void);

/* Undoes sg_disk_make: detaches the mount (the loop device goes with the
 * last reference: the sandbox's mount namespace dies with its init),
 * removes the mount point and the image. Any of them may be gone already. */
void sg_disk_remove(const char *mnt, const char *image);

/* `gc --orphan-cgroups`: detaches the disks of this state directory's
 * sandboxes whose records are gone (an `rm -rf` of sb/<id>), found by
 * their uid's slot, and gives the slot back. Returns how many. */
int sg_disk_sweep(void);

/* The disk of sandbox id found by its uid's slot, for a cleanup that has
 * lost the sandbox's record: detached, and the slot given back. */
int sg_disk_remove_of(const char *id);

/* Removes the workspace create made for m (own_workspace): its file
 * system (m->disk > 0) or its directory. Nothing for the operator's own. */
void sg_disk_remove_workspace(const sg_sandbox_meta *m);

/* Destroy's release of m's workspace, without waiting for it. A file
 * system's release takes seconds when the learner left much to write back
 * or the host discards on unlink (ext4 `discard`: the image's freed
 * extents discarded synchronously): destroy answers first. Its image is
 * renamed at once (O(1)) to <state>/SG_DISK_RECLAIM/<id>, and a detached
 * reclaimer (`sandglass-supervisor reclaim`, in sandglass/:host: charged
 * to sandglass, neither to the caller nor to the sandbox) resets the loop
 * device's bounds, detaches the mount (the loop device goes with it),
 * gives the uid slot back (only then: no other sandbox mounts on the mount
 * point before it is free) and unlinks the image. Returns true when the
 * reclaimer has it (the caller then leaves the uid slot alone); false when
 * the workspace was removed here (a directory, or no rename: as
 * sg_disk_remove_workspace). A reclaimer that died leaves its entry:
 * `sandglass gc` reclaims it (sg_disk_reclaim). */
#define SG_DISK_RECLAIM "reclaim"
bool sg_disk_release_workspace(const sg_sandbox_meta *m);

/* Reclaims the entries of <state>/SG_DISK_RECLAIM: each one's mount,
 * slot and image, as the reclaimer does. An entry a live reclaimer holds
 * (its flock) is waited for up to wait_ms (0: skipped). Returns how many
 * were reclaimed here. */
int sg_disk_reclaim(int wait_ms);

/* `sandglass-supervisor reclaim STATE_DIR`: the reclaimer's main. With
 * SANDGLASS_TEST_RECLAIM_HOLD=FILE (tests only) it holds each entry it
 * took (its flock) while FILE exists (2 minutes at most). */
int sg_disk_reclaim_main(int argc, char **argv);

#endif
