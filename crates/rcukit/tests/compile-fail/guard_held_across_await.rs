// A guard held across an `.await` makes the future `!Send`: an executor that moves tasks
// between threads refuses it. `Rcu::read_owned()` is the read section for that.
use rcukit::Rcu;
use std::future::Future;

fn spawn<F: Future<Output = ()> + Send + 'static>(_task: F) {}

async fn elsewhere() {}

fn main() {
    spawn(async {
        let guard = Rcu::global().read();
        elsewhere().await;
        drop(guard);
    });
}
