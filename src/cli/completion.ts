// `berth completion bash|zsh` (docs/cli.md#shell-completion): a completion script written from the
// command tree as it is when it runs (every command, subcommand and option commander knows, hidden
// ones left out), so a command added anywhere completes without touching this file.
//   source <(berth completion bash)      # or save it as ~/.local/share/bash-completion/completions/berth
//   source <(berth completion zsh)       # after compinit; or save it as _berth in a folder of $fpath
import { Argument, type Command, type Help, type Option } from 'commander';

/** What completes after one command path (`berth env create`). */
interface Level {
  path: string;
  /** Subcommands, and the choices of its first argument, with their descriptions. */
  words: [string, string][];
  options: [string, string][];
  /** The flags that take a value: the word after one is that value. */
  valued: string[];
  /** The values an option accepts, where it names them. */
  choices: [string, readonly string[]][];
}

const flagsOf = (o: Option) => [o.short, o.long].filter((f): f is string => Boolean(f));

function levels(command: Command, help: Help, path: string): Level[] {
  const subcommands = help.visibleCommands(command);
  const options = help.visibleOptions(command);
  const level: Level = {
    path,
    words: [
      ...subcommands.map((c): [string, string] => [c.name(), c.description()]),
      ...(command.registeredArguments[0]?.argChoices ?? []).map((c): [string, string] => [c, '']),
    ],
    options: options.flatMap((o) => flagsOf(o).map((f): [string, string] => [f, o.description])),
    valued: options.filter((o) => o.required || o.optional).flatMap(flagsOf),
    choices: options.flatMap((o) => (o.argChoices ? flagsOf(o).map((f): [string, readonly string[]] => [f, o.argChoices!]) : [])),
  };
  return [level, ...subcommands.flatMap((c) => levels(c, help, `${path} ${c.name()}`))];
}

/** A single-quoted shell word (bash and zsh alike). */
const q = (s: string) => `'${s.replaceAll("'", "'\\''")}'`;

function bash(all: Level[]): string {
  const spec = all.map(
    (l) =>
      `    ${q(l.path)}) words=${q(l.words.map(([w]) => w).join(' '))}; options=${q(l.options.map(([f]) => f).join(' '))}; valued=${q(l.valued.join(' '))} ;;`,
  );
  const choices = all.flatMap((l) => l.choices.map(([flag, values]) => `    ${q(`${l.path} ${flag}`)}) choices=${q(values.join(' '))} ;;`));
  return `# berth completion for bash: source <(berth completion bash)
_berth_spec() {
  case "$1" in
${spec.join('\n')}
    *) words=''; options=''; valued='' ;;
  esac
}
_berth_choices() {
  case "$1" in
${choices.join('\n')}
    *) choices='' ;;
  esac
}
_berth() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" prev="\${COMP_WORDS[COMP_CWORD-1]}" cmd=berth words options valued choices i
  # The command path so far: the words that name a subcommand, skipping options and their values.
  for ((i = 1; i < COMP_CWORD; i++)); do
    _berth_spec "$cmd"
    [[ " $valued " == *" \${COMP_WORDS[i-1]} "* ]] && continue
    [[ "\${COMP_WORDS[i]}" != -* && " $words " == *" \${COMP_WORDS[i]} "* ]] && cmd="$cmd \${COMP_WORDS[i]}"
  done
  _berth_spec "$cmd"
  if [[ " $valued " == *" $prev "* ]]; then
    # An option's value: its choices, else file names (complete -o default).
    _berth_choices "$cmd $prev"
    COMPREPLY=($(compgen -W "$choices" -- "$cur"))
  elif [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$options" -- "$cur"))
  else
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
  fi
}
complete -o default -F _berth berth
`;
}

function zsh(all: Level[]): string {
  // _describe's "name:description"; a colon in the name would end it.
  const described = (pairs: [string, string][]) => pairs.map(([w, d]) => q(d ? `${w.replaceAll(':', '\\:')}:${d}` : w)).join(' ');
  const spec = all.map(
    (l) => `    (${q(l.path)}) subs=(${described(l.words)}); opts=(${described(l.options)}); valued=(${l.valued.map(q).join(' ')}) ;;`,
  );
  const choices = all.flatMap((l) =>
    l.choices.map(([flag, values]) => `    (${q(`${l.path} ${flag}`)}) choices=(${values.map(q).join(' ')}) ;;`),
  );
  return `#compdef berth
# berth completion for zsh: source <(berth completion zsh) after compinit, or save it as _berth in $fpath
_berth_spec() {
  case $1 in
${spec.join('\n')}
    (*) subs=(); opts=(); valued=() ;;
  esac
}
_berth_choices() {
  case $1 in
${choices.join('\n')}
    (*) choices=() ;;
  esac
}
_berth() {
  local cmd=berth i
  local -a subs opts valued choices
  # The command path so far: the words that name a subcommand, skipping options and their values.
  for (( i = 2; i < CURRENT; i++ )); do
    _berth_spec "$cmd"
    (( \${valued[(Ie)\${words[i-1]}]} )) && continue
    [[ \${words[i]} != -* ]] && (( \${subs[(I)\${(b)words[i]}(|:*)]} )) && cmd="$cmd \${words[i]}"
  done
  _berth_spec "$cmd"
  if (( \${valued[(Ie)\${words[CURRENT-1]}]} )); then
    _berth_choices "$cmd \${words[CURRENT-1]}"
    if (( \${#choices} )); then compadd -a choices; else _files; fi
  elif [[ \${words[CURRENT]} == -* ]]; then
    _describe -t options option opts
  elif (( \${#subs} )); then
    _describe -t commands command subs
  else
    _files
  fi
}
if [[ "\${funcstack[1]}" == _berth ]]; then _berth "$@"; else compdef _berth berth; fi
`;
}

export function registerCompletionCommands(program: Command): void {
  program
    .command('completion')
    .description('print a shell completion script: source <(berth completion bash)')
    .addArgument(new Argument('<shell>', 'the shell').choices(['bash', 'zsh']))
    .action((shell: 'bash' | 'zsh') => {
      const all = levels(program, program.createHelp(), 'berth');
      process.stdout.write(shell === 'bash' ? bash(all) : zsh(all));
    });
}
