//! Fencing tokens for storage on Apache OpenDAL (work in progress).
