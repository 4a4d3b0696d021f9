// The two suites that run `berth agent` as a process, in one file so that they never run at the
// same time: an agent binds its sandbox's service ports on this machine's loopback (10000 + the
// target port: 17000 and 15432 in both), and two at once would take each other's ports.
import './sandbox-agent.suite';
import './agents-e2e.suite';
