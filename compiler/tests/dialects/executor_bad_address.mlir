// RUN: backline-opt %s --verify-diagnostics | filecheck %s
// RUN: ! backline-opt %s > /dev/null

// CHECK: 'executor.open' address 'decoder-host' has no port: write it as 'host:port'
func.func @f() {
  %s = executor.open("decoder-host") : !executor.session
  func.return
}
