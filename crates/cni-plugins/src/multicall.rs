//! Running one of this crate's plugins as the process, chosen by name: the entry of the
//! multi-call executables (`rcni-plugins`, and `rcni` when it is run under a plugin's name).

use cni_invoke::OwnPlugins;

use crate::registry::{plugin_by_name, PLUGINS};

/// What a multi-call executable registers with [`cni_invoke::register_own_plugins`], so that
/// a plugin found in `CNI_PATH` that is the executable itself is forked instead of executed.
pub const OWN_PLUGINS: OwnPlugins = OwnPlugins {
    contains: is_plugin,
    run: run_registered,
};

/// Whether `name` is one of the plugins.
pub fn is_plugin(name: &str) -> bool {
    PLUGINS.iter().any(|p| p.name == name)
}

/// Runs the plugin `name` as the process (environment, stdin, stdout) and returns its exit
/// code; `None` when there is no plugin of that name. An IPAM delegate that is this
/// executable then runs in-process (one process per ADD).
pub fn run_plugin(name: &str) -> Option<i32> {
    let plugin = plugin_by_name(name)?;
    cni_plugin::set_program_name(name);
    crate::common::phase_trace::mark("main");
    let plugin = test_panic::wrap(name, plugin);
    cni_plugin::ipam::register_in_process(|name| {
        plugin_by_name(name).map(|plugin| test_panic::wrap(name, plugin))
    });
    Some(cni_plugin::run(&*plugin))
}

/// `dhcp daemon ARGS...`: the dhcp IPAM plugin's daemon, as Go's `/opt/cni/bin/dhcp daemon`.
pub fn run_dhcp_daemon(args: &[std::ffi::OsString]) -> i32 {
    let args: Vec<&str> = args
        .iter()
        .map(|a| a.to_str().unwrap_or("\u{fffd}"))
        .collect();
    crate::dhcp::run_daemon(&args)
}

fn run_registered(name: &str) -> i32 {
    // `contains` said yes; a name it did not know exits as an unknown command would.
    run_plugin(name).unwrap_or(1)
}

/// Debug builds only: `RCNI_TEST_PANIC=1` makes ADD, DEL and CHECK panic (CHECK on a worker
/// thread), to test the panic hook against the real binary; with `RCNI_TEST_PANIC_ONLY=<plugin>`
/// only that plugin panics (a delegate, run in-process or executed). Release builds ignore
/// both variables.
#[cfg(debug_assertions)]
mod test_panic {
    use cni_plugin::{CmdArgs, Plugin};
    use cni_types::{CniError, CniResult, SpecVersion};

    pub fn wrap(name: &str, plugin: Box<dyn Plugin>) -> Box<dyn Plugin> {
        let only = std::env::var_os("RCNI_TEST_PANIC_ONLY");
        if std::env::var_os("RCNI_TEST_PANIC").is_some_and(|v| v == "1")
            && only.is_none_or(|only| only == name)
        {
            Box::new(Panicking(plugin))
        } else {
            plugin
        }
    }

    struct Panicking(Box<dyn Plugin>);

    impl Plugin for Panicking {
        fn add(&self, _: &CmdArgs) -> Result<CniResult, CniError> {
            panic!("RCNI_TEST_PANIC in ADD")
        }
        fn del(&self, _: &CmdArgs) -> Result<(), CniError> {
            panic!("RCNI_TEST_PANIC in DEL")
        }
        /// Panics on another thread, as work inside a network namespace does.
        fn check(&self, _: &CmdArgs) -> Result<(), CniError> {
            std::thread::scope(|s| {
                let _ = s
                    .spawn(|| panic!("RCNI_TEST_PANIC in CHECK (worker thread)"))
                    .join();
            });
            Ok(())
        }
        fn supported_versions(&self) -> Vec<SpecVersion> {
            self.0.supported_versions()
        }
        fn about(&self) -> String {
            self.0.about()
        }
    }
}

#[cfg(not(debug_assertions))]
mod test_panic {
    pub fn wrap(_name: &str, plugin: Box<dyn cni_plugin::Plugin>) -> Box<dyn cni_plugin::Plugin> {
        plugin
    }
}
