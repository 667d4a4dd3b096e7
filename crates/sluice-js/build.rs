//! Links the addon the way Node loads it (napi-rs' platform flags).

fn main() {
    napi_build::setup();
}
