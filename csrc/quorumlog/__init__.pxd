# Makes csrc/quorumlog a package for cimport (quorumlog._format, quorumlog._commitlog, ...).
