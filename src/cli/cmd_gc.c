/* cmd_gc: not written yet. */
