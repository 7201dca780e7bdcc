//! The chart's pod harness: runs the rendered gateway StatefulSet and
//! supervisor Deployment as real processes, each pod in its own network,
//! mount and PID namespaces, with the kubelet's and the controllers'
//! behaviour the chart relies on (probes, `preStop`, grace periods, rolling
//! updates, Services, per-pod claims). See `helm/README.md`.
//!
//! Layout:
//! - [`manifest`]: the rendered objects, typed;
//! - [`pod`]: one pod as processes in its namespaces;
//! - [`probe`]: HTTP probes;
//! - [`proxy`]: Services as virtual addresses with a TCP proxy;
//! - [`cluster`]: controllers and the kubelet loop.
//!
//! Needs root (namespaces, mounts). Linux only.

pub mod api;
pub mod cluster;
pub mod controllers;
pub mod harness;
pub mod manifest;
pub mod pod;
pub mod probe;
pub mod proxy;
pub mod rbac;
pub mod release;
pub mod token;
