/* cgroup: not written yet. */
