/* ctl: not written yet. */
