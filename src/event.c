/* event: not written yet. */
