// Malformed backline.target attributes; each variant rewrites the attribute with sed.
// RUN: backline-opt %s -p cross-compile-targets --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s -p cross-compile-targets > /dev/null
// RUN: sed 's|= "NOT-A-DICT"|= {name = "a", arch = "x86"}|' %s \
// RUN:   | backline-opt - -p cross-compile-targets --verify-diagnostics | filecheck %s --check-prefix=UNKNOWN
// RUN: sed 's|= "NOT-A-DICT"|= {triple = "aarch64-unknown-linux-gnu"}|' %s \
// RUN:   | backline-opt - -p cross-compile-targets --verify-diagnostics | filecheck %s --check-prefix=NONAME
// RUN: sed 's|= "NOT-A-DICT"|= {name = "../escape"}|' %s \
// RUN:   | backline-opt - -p cross-compile-targets --verify-diagnostics | filecheck %s --check-prefix=BADNAME
// RUN: sed 's|= "NOT-A-DICT"|= {name = "a", triple = 3}|' %s \
// RUN:   | backline-opt - -p cross-compile-targets --verify-diagnostics | filecheck %s --check-prefix=NOTSTR
// RUN: sed 's|= "NOT-A-DICT"|= {name = "a", triple = ""}|' %s \
// RUN:   | backline-opt - -p cross-compile-targets --verify-diagnostics | filecheck %s --check-prefix=EMPTY
// RUN: sed 's|= "NOT-A-DICT"|= {name = "a", address = "decoder-host"}|' %s \
// RUN:   | backline-opt - -p cross-compile-targets --verify-diagnostics | filecheck %s --check-prefix=ADDRESS

// CHECK: cross-compile-targets: backline.target on the nested module @t must be a dictionary {name = "...", triple = "...", address = "host:port"}, got "NOT-A-DICT"
// UNKNOWN: cross-compile-targets: backline.target on the nested module @t has unknown key(s) arch; the keys are name, triple, address
// NONAME: cross-compile-targets: backline.target on the nested module @t needs a name
// BADNAME: cross-compile-targets: backline.target on the nested module @t: name '../escape' must match [A-Za-z0-9_][A-Za-z0-9_.+-]* (it names the object file)
// NOTSTR: cross-compile-targets: target 'a': 'triple' must be a string, got 3 : i64
// EMPTY: cross-compile-targets: target 'a': triple must not be empty (leave it out for the host's)
// ADDRESS: cross-compile-targets: target 'a': executor address 'decoder-host' has no port: write it as 'host:port'
builtin.module {
  builtin.module @t attributes {backline.target = "NOT-A-DICT"} {
    llvm.func @a() {
      llvm.return
    }
  }
}
