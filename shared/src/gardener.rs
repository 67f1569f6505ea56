//! The Gardener types the infrastructure manager writes and reads.
