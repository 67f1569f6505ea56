//! Every label, annotation, finalizer, condition type and reason, Secret name and field manager, with upstream's exact strings.
