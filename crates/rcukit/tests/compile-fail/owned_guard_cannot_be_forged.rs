// Containers accept only rcukit's own guards: `ReadSection` is sealed.
use rcukit::{Rcu, ReadSection};

struct Forged;

impl ReadSection for Forged {
    fn is_of(&self, _: &Rcu) -> bool {
        true
    }
    fn domain_id(&self) -> u64 {
        0
    }
    fn domain_name(&self) -> &str {
        ""
    }
}

fn main() {}
