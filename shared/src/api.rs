//! The custom resources of the infrastructure manager (`infrastructuremanager.kyma-project.io`).
