//! `docker-compose.yml`, generated from the specs (`services compose`).

/// The compose file for every service's containers.
pub fn render() -> String {
    String::new()
}
