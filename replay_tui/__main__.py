from replay_tui.program import main

main()
