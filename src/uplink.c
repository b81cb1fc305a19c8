/* uplink: not written yet. */
