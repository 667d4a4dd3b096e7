//! SIGHUP: the configuration file read again (`sluice serve`, `sluice mcp`), never the end of the process.

/// Runs `reload` on every SIGHUP, on the current runtime, for as long as
/// the process lives. Registered before it returns, so a SIGHUP sent from
/// then on never takes the default action (ending the process). Nothing on
/// platforms without SIGHUP.
pub(crate) fn on_hangup(reload: impl Fn() + Send + 'static) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                tracing::info!("SIGHUP: reloading the configuration file");
                reload();
            }
        });
    }
    #[cfg(not(unix))]
    drop(reload);
    Ok(())
}
