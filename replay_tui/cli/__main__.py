from replay_tui.cli import main

main()
