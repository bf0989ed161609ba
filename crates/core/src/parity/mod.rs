//! Parity math: XOR, RAID-6 P+Q (md / ISA-L convention), RMW update, recovery, check.
