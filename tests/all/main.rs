//! The integration test suite: one binary (it links once), a module per area.

mod agent;
mod agent_loop;
mod chat;
mod cli;
mod compile;
mod config_golden;
mod dedup;
mod fake_model;
mod fuzzing;
mod hostile;
mod http_limits;
mod invoke;
mod large;
mod layers;
mod mcp;
mod mcp_import;
mod mcp_list;
mod memory;
mod network;
mod plugins;
mod props;
mod reload;
mod runtime;
mod sandbox;
mod scripted;
mod support;
