/* rootfs: not written yet. */
